//! What a backup records of the key space (`contents::take`), on real etcd: a key space of
//! large values, whose digest pages would exceed the client's message limit at the first page
//! size, is read in smaller pages and digests the same as one of small pages would.

use etcd_snapshot::contents::{self, HashKv};
use etcd_snapshot::{EtcdConnection, select_member};
use testbed::Etcd;

#[tokio::test]
async fn a_key_space_of_large_values_is_digested_in_smaller_pages() {
    let etcd = Etcd::start().await.unwrap();
    let mut client = etcd.client().await.unwrap();
    // 48 values of 1 MiB: 48 MiB in one page of the first size.
    let value = vec![b'v'; 1 << 20];
    for i in 0..48 {
        client
            .put(format!("/large/{i:02}"), value.clone(), None)
            .await
            .unwrap();
    }
    let mut member = select_member(&EtcdConnection::new(vec![etcd.endpoint.clone()]))
        .await
        .unwrap();
    let revision = member.revision;
    let taken = contents::take(&mut member.client, &etcd.endpoint, revision, HashKv::Take)
        .await
        .unwrap();
    assert_eq!(taken.key_count, 48);
    // The same digest as one key at a time gives: recomputed here independently.
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    for i in 0..48 {
        let got = client.get(format!("/large/{i:02}"), None).await.unwrap();
        let kv = &got.kvs()[0];
        for field in [kv.key(), kv.value()] {
            hasher.update((field.len() as u64).to_be_bytes());
            hasher.update(field);
        }
        for number in [
            kv.create_revision(),
            kv.mod_revision(),
            kv.version(),
            kv.lease(),
        ] {
            hasher.update(number.to_be_bytes());
        }
    }
    assert_eq!(
        taken.content_sha256.as_deref(),
        Some(hex::encode(hasher.finalize()).as_str())
    );
}
