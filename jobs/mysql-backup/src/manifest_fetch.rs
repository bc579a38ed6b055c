//! Reading the many small manifests under a prefix: a request each, a few at a time.

use backup_storage::{MANIFEST_SUFFIX, ObjectInfo, Store};
use futures::{StreamExt, TryStreamExt, stream};

use crate::error::Result;

/// How many manifests are fetched at once.
const MANIFEST_FETCHES: usize = 8;

/// The manifests among `objects` (keys ending in the manifest suffix) whose described key
/// `wanted` accepts: (described key, manifest bytes), [`MANIFEST_FETCHES`] at a time. Results are
/// taken in listing order, so the first fetch that fails is the error, as when they ran one after
/// another; a manifest deleted since the listing is left out.
pub async fn fetch_manifests<'a>(
    store: &Store,
    objects: &'a [ObjectInfo],
    wanted: impl Fn(&str) -> bool,
) -> Result<Vec<(&'a str, Vec<u8>)>> {
    let fetches = objects.iter().filter_map(|object| {
        let described = object.key.strip_suffix(MANIFEST_SUFFIX)?;
        wanted(described).then_some(async move {
            let bytes = store.get_small(&object.key).await?;
            Ok::<_, backup_storage::StorageError>(bytes.map(|b| (described, b.to_vec())))
        })
    });
    let fetched: Vec<Option<(&str, Vec<u8>)>> = stream::iter(fetches)
        .buffered(MANIFEST_FETCHES)
        .try_collect()
        .await?;
    Ok(fetched.into_iter().flatten().collect())
}
