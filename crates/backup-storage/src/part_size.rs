/// S3 multipart limits (AWS documents them; S3-compatible servers follow them).
pub const MAX_PARTS: i32 = 10_000;
pub const MAX_PART_SIZE: usize = 5 * 1024 * 1024 * 1024;

/// Part size for a stream of unknown length.
///
/// Parts start at `base` and double every 1,000 parts, so 10,000 parts cover
/// `base * 1,023,000` bytes (8 TiB with the 8 MiB default, above S3's 5 TiB object limit),
/// while every snapshot below `base * 1000` (8 GiB, etcd's recommended maximum) uses the
/// base size: memory does not grow with the snapshot.
#[derive(Debug, Clone, Copy)]
pub struct PartSizer {
    base: usize,
}

impl PartSizer {
    pub const DEFAULT_BASE: usize = 8 * 1024 * 1024;
    /// Below 8 MiB, doubling every 1,000 parts no longer reaches 5 TiB in 10,000 parts
    /// (S3's own minimum part size is 5 MiB).
    pub const MIN_BASE: usize = 8 * 1024 * 1024;

    pub fn new(base: usize) -> Self {
        PartSizer {
            base: base.clamp(Self::MIN_BASE, MAX_PART_SIZE),
        }
    }

    /// Size of part `number` (1-based, as S3 numbers them).
    pub fn size_of(&self, number: i32) -> usize {
        let doublings = ((number.max(1) - 1) / 1000) as u32;
        self.base
            .saturating_mul(1usize << doublings.min(20))
            .min(MAX_PART_SIZE)
    }

    /// Largest stream that fits in 10,000 parts.
    pub fn capacity(&self) -> u64 {
        (1..=MAX_PARTS).map(|n| self.size_of(n) as u64).sum()
    }
}

impl Default for PartSizer {
    fn default() -> Self {
        PartSizer::new(Self::DEFAULT_BASE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIB: u64 = 1024 * 1024 * 1024 * 1024;

    #[test]
    fn default_parts_cover_the_s3_object_limit() {
        assert!(PartSizer::default().capacity() >= 5 * TIB);
    }

    #[test]
    fn smallest_base_still_covers_five_tebibytes() {
        assert!(PartSizer::new(0).capacity() >= 5 * TIB);
    }

    #[test]
    fn size_is_flat_for_the_first_thousand_parts_then_doubles() {
        let s = PartSizer::default();
        assert_eq!(s.size_of(1), 8 << 20);
        assert_eq!(s.size_of(1000), 8 << 20);
        assert_eq!(s.size_of(1001), 16 << 20);
        assert_eq!(s.size_of(2001), 32 << 20);
    }

    #[test]
    fn size_never_exceeds_the_part_limit() {
        let s = PartSizer::new(MAX_PART_SIZE);
        assert_eq!(s.size_of(10_000), MAX_PART_SIZE);
        assert_eq!(PartSizer::new(1).size_of(1), PartSizer::MIN_BASE);
    }
}
