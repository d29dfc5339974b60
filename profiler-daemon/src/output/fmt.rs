//! Number and text formatting shared by the human-readable outputs.

pub use crate::sys::units::{bytes, ms, rate, us};

/// `s` cut to at most `max` characters, the last one `…` when something was cut.
pub fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// `[x, y, z]` as `XxYxZ` (`64x1x1`).
pub fn dim3(d: [u32; 3]) -> String {
    format!("{}x{}x{}", d[0], d[1], d[2])
}

/// Column alignment for [`table`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// A text table: each line starts with `indent`, columns are two spaces apart, widths fit the
/// widest cell (counted in characters); the last column is not padded.
pub fn table(indent: &str, headers: &[&str], align: &[Align], rows: &[Vec<String>]) -> String {
    let n = headers.len();
    let mut width: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate().take(n) {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = headers.iter().map(|h| (*h).to_owned()).collect();
    for r in std::iter::once(&header).chain(rows) {
        let mut line = indent.to_owned();
        for (i, c) in r.iter().enumerate().take(n) {
            let pad = width[i] - c.chars().count();
            let right = align.get(i) == Some(&Align::Right);
            if i > 0 {
                line.push_str("  ");
            }
            if right {
                line.extend(std::iter::repeat_n(' ', pad));
            }
            line.push_str(c);
            if !right && i + 1 < n {
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(52_428_800), "50.0 MiB");
        assert_eq!(bytes(u64::MAX), "16.0 EiB");
        assert_eq!(ms(1_234_567), "1.235");
        assert_eq!(us(49_919), "49.9");
        assert_eq!(dim3([64, 1, 1]), "64x1x1");
    }

    #[test]
    fn truncation_counts_characters() {
        assert_eq!(truncate("abcdef", 6), "abcdef");
        assert_eq!(truncate("abcdef", 4), "abc…");
        assert_eq!(truncate("ééééé", 3), "éé…");
    }

    #[test]
    fn tables_align() {
        let rows = vec![
            vec!["a".to_owned(), "1".to_owned(), "x".to_owned()],
            vec!["bbb".to_owned(), "22".to_owned(), "yy".to_owned()],
        ];
        let t = table(
            "  ",
            &["name", "n", "z"],
            &[Align::Left, Align::Right, Align::Left],
            &rows,
        );
        assert_eq!(t, "  name   n  z\n  a      1  x\n  bbb   22  yy\n");
    }
}
