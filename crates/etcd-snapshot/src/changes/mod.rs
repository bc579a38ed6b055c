//! The continuous archive of changes between snapshots, and restores to a point.
//!
//! `archive` watches every key from the newest snapshot's revision and stores segments
//! beside the snapshots (`segment` says where, `record` how, `writer`/`reader` stream them);
//! `plan` decides which snapshot and segments reach a point; `point_in_time` replays them into
//! a scratch member and writes a snapshot file at that point.

mod archive;
mod plan;
mod point_in_time;
mod reader;
mod record;
mod retention;
mod segment;
mod writer;

pub use archive::{ArchiveEvent, ArchiveOptions, archive, newest_snapshot, stopped};
pub use plan::{Target, Unreachable};
pub use point_in_time::{
    PointInTimeError, PointInTimeOptions, PointInTimeReport, PreparedPoint, REPLAY_MEMBER_FLAGS,
    UNKNOWN_LEASE_TTL, prepare_point, replay_point, restore_to_point,
};
pub use reader::SegmentReader;
pub use record::{Change, ChangeKind};
pub use retention::{KeptSnapshot, segments_to_delete, segments_to_prune};
pub use segment::SegmentKey;
pub use segment::{
    SegmentManifest, archive_prefix, cluster_prefix, parse_segment_key, segment_key,
};
pub use writer::SegmentLayers;
