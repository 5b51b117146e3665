//! Figures as text for people: rounded, but never to zero. An emulated
//! lab's rates are tiny (0.0003 Mpps, 0.0000006 GB/s), and a table or page
//! that printed them as 0.00 would say nothing moved.

/// One decimal from 100 up, three from 1, and four significant digits
/// below 1.
pub fn shown(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.1}")
    } else if v.abs() >= 1.0 {
        format!("{v:.3}")
    } else if v == 0.0 || !v.is_finite() {
        format!("{v}")
    } else {
        let decimals = 3 - v.abs().log10().floor() as i32;
        format!("{v:.*}", decimals.max(0) as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::shown;

    #[test]
    fn test_small_figures_keep_four_significant_digits() {
        assert_eq!(shown(1234.56), "1234.6");
        assert_eq!(shown(1.09), "1.090");
        assert_eq!(shown(0.0002791), "0.0002791");
        assert_eq!(shown(0.0042), "0.004200");
        assert_eq!(shown(0.0), "0");
    }
}
