//! The generated data every system loads: webtable-shaped pages.
//!
//! A page is ~2.7 KB: a 2-byte language, a 16-byte checksum, a BIGINT rank,
//! ~2 KB of contents and five anchors (referring page → link text). Keys
//! are reversed domains with 100 pages per domain, so a domain prefix
//! selects ~100 rows. The data depends only on the row count.

/// One page.
#[derive(Debug, Clone)]
pub struct Page {
    /// The row key: `com.domainNNNNNNN.www/pageNNN`.
    pub key: String,
    /// `EN`, `DE`, `FR`, `JA` or `ES`.
    pub language: &'static str,
    /// 16 bytes.
    pub checksum: [u8; 16],
    /// A number to sum.
    pub rank: i64,
    /// ~2 KB of text.
    pub contents: String,
    /// Five (referring page, link text) pairs.
    pub anchors: Vec<(String, String)>,
}

/// Pages per domain: the size of a W3 range.
pub const PAGES_PER_DOMAIN: usize = 100;

/// The languages, in the proportions the pages have them.
pub const LANGUAGES: [&str; 5] = ["EN", "DE", "FR", "JA", "ES"];

/// A small deterministic generator (SplitMix64), so every system and every
/// run sees the same pages.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// The key of page `i`.
pub fn page_key(i: usize) -> String {
    format!(
        "com.domain{:07}.www/page{:03}",
        i / PAGES_PER_DOMAIN,
        i % PAGES_PER_DOMAIN
    )
}

/// The key prefix of domain `d`: ~100 pages.
pub fn domain_prefix(d: usize) -> String {
    format!("com.domain{d:07}.www/")
}

/// Page `i`.
pub fn page(i: usize) -> Page {
    let mut rng = Rng::new(i as u64);
    let mut checksum = [0u8; 16];
    checksum[..8].copy_from_slice(&rng.next_u64().to_be_bytes());
    checksum[8..].copy_from_slice(&rng.next_u64().to_be_bytes());
    let words = ["the", "page", "link", "table", "row", "cell", "data", "web"];
    let mut contents = String::with_capacity(2100);
    contents.push_str("<html><body>");
    while contents.len() < 2048 {
        contents.push_str(words[rng.below(words.len())]);
        contents.push(' ');
    }
    contents.push_str("</body></html>");
    let anchors = (0..5)
        .map(|a| {
            // Distinct per page: the referring pages differ modulo 5.
            let from = rng.below(200_000) * 5 + a;
            (page_key(from), format!("link {a} to {i}"))
        })
        .collect();
    Page {
        key: page_key(i),
        language: LANGUAGES[rng.below(LANGUAGES.len())],
        checksum,
        rank: (rng.next_u64() % 1_000_000) as i64,
        contents,
        anchors,
    }
}

/// Pages `0..n`.
pub fn pages(n: usize) -> Vec<Page> {
    (0..n).map(page).collect()
}

impl Page {
    /// The bytes of the page's values (what any system must store).
    pub fn logical_bytes(&self) -> usize {
        self.key.len()
            + self.language.len()
            + self.checksum.len()
            + 8
            + self.contents.len()
            + self
                .anchors
                .iter()
                .map(|(q, v)| q.len() + v.len())
                .sum::<usize>()
    }
}
