//! What the defragmentation round relies on to know a member is done, checked against a real
//! etcd: while a member defragments it serves no read (its backend holds its locks while it
//! rebuilds the file); once done it serves reads again. Whether it answers `Status` meanwhile
//! varies (sometimes at once, sometimes only once done), so `Status` alone cannot tell.

use std::time::{Duration, Instant};

use etcd_operator::defrag::serves_read;
use testbed::Etcd;

#[tokio::test]
async fn a_defragmenting_member_serves_no_read_until_it_is_done() {
    let etcd = Etcd::start().await.unwrap();
    // Enough live data that the file's rebuild lasts several probes.
    etcd.fill_random(96 * 1024 * 1024, 256 * 1024)
        .await
        .unwrap();
    let mut defragmenting = etcd.client().await.unwrap();
    let mut prober = etcd.client().await.unwrap();
    let mut asker = etcd.client().await.unwrap();
    assert!(serves_read(&mut prober, Duration::from_secs(3)).await);

    let started = Instant::now();
    let call = tokio::spawn(async move { defragmenting.defragment().await.map(|_| ()) });
    // (elapsed ms, Status answered, a read served), probed every few milliseconds.
    let mut seen = Vec::new();
    while !call.is_finished() {
        let (status, reads) = tokio::join!(
            tokio::time::timeout(Duration::from_millis(100), asker.status()),
            serves_read(&mut prober, Duration::from_millis(100))
        );
        if !call.is_finished() {
            seen.push((
                started.elapsed().as_millis(),
                matches!(status, Ok(Ok(_))),
                reads,
            ));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    call.await.unwrap().unwrap();
    eprintln!(
        "defragmentation took {:?}; (ms, Status answered, read served) while it ran: {seen:?}",
        started.elapsed()
    );
    assert!(
        seen.iter().any(|(_, _, reads)| !reads),
        "no read was refused while the member defragmented: {seen:?}"
    );
    assert!(serves_read(&mut prober, Duration::from_secs(3)).await);
}
