//! Byte counts as people write them on the command line and in suites
//! (`4MiB`, `256k`, `1.5 GiB`).

/// A byte count from the command line: a number with an optional binary
/// unit, any case: B, K/KB/KiB, M/MB/MiB, G/GB/GiB (`4MiB`, `256k`, `1.5 GiB`,
/// `4096`). A fraction must come to whole bytes.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let syntax =
        || format!("`{text}` is not a size: write bytes or a number with KiB, MiB or GiB, like 4MiB or 256KiB");
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return Err(syntax()),
    };
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() || number.ends_with('.') || frac.contains('.') {
        return Err(syntax());
    }
    // (whole + frac / 10^n) << shift, exactly.
    let scale = 10u128.checked_pow(frac.len() as u32).ok_or_else(syntax)?;
    let whole: u128 = whole.parse().map_err(|_| syntax())?;
    let frac_v: u128 = if frac.is_empty() {
        0
    } else {
        frac.parse().map_err(|_| syntax())?
    };
    let numerator = whole
        .checked_mul(scale)
        .and_then(|w| w.checked_add(frac_v))
        .and_then(|n| n.checked_mul(1u128 << shift))
        .ok_or_else(|| format!("`{text}` is too large"))?;
    if !numerator.is_multiple_of(scale) {
        return Err(format!("`{text}` is not a whole number of bytes"));
    }
    u64::try_from(numerator / scale).map_err(|_| format!("`{text}` is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_parse_size_takes_binary_units_in_any_case() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("256KiB"), Ok(256 << 10));
        assert_eq!(parse_size("256k"), Ok(256 << 10));
        assert_eq!(parse_size("4MiB"), Ok(4 << 20));
        assert_eq!(parse_size(" 4 mb "), Ok(4 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("1.5KiB"), Ok(1536));
        assert_eq!(parse_size("12B"), Ok(12));
        for bad in ["", "MiB", "4 TiB", "1.5", "1..5K", "x", "-4K", "4.K"] {
            assert!(parse_size(bad).is_err(), "{bad:?} parsed");
        }
        assert!(parse_size("0.3B").unwrap_err().contains("whole number"));
        assert!(parse_size("99999999999999999999GiB").unwrap_err().contains("too large"));
    }
}
