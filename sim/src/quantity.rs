//! Kubernetes resource quantities as bytes, as the API machinery reads them.

/// Bytes of a Kubernetes quantity (`10Gi`, `512M`, `1.5Gi`, `1e9`), rounded up like
/// `Quantity.Value()`; `None` when it is not a non-negative quantity.
pub fn parse_quantity(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    if number.is_empty() || number.starts_with('.') && number.len() == 1 {
        return None;
    }
    let binary = |shift: u32| Some(Scale::Times(1u128 << shift));
    let scale = match suffix {
        "" => Some(Scale::Times(1)),
        "Ki" => binary(10),
        "Mi" => binary(20),
        "Gi" => binary(30),
        "Ti" => binary(40),
        "Pi" => binary(50),
        "Ei" => binary(60),
        "k" => Some(Scale::Times(1_000)),
        "M" => Some(Scale::Times(1_000_000)),
        "G" => Some(Scale::Times(1_000_000_000)),
        "T" => Some(Scale::Times(1_000_000_000_000)),
        "P" => Some(Scale::Times(1_000_000_000_000_000)),
        "E" => Some(Scale::Times(1_000_000_000_000_000_000)),
        "m" => Some(Scale::Exponent(-3)),
        exp if exp.starts_with(['e', 'E']) => exp[1..].parse().ok().map(Scale::Exponent),
        _ => None,
    }?;
    // Integers times integer scales stay exact (a 64Gi disk must not become 64Gi - 1).
    if let (Ok(n), Scale::Times(k)) = (number.trim_start_matches('+').parse::<u128>(), scale) {
        return u64::try_from(n.checked_mul(k)?).ok();
    }
    let value: f64 = number.parse().ok()?;
    let bytes = match scale {
        Scale::Times(k) => value * k as f64,
        Scale::Exponent(e) => value * 10f64.powi(e),
    }
    .ceil();
    (bytes.is_finite() && bytes >= 0.0 && bytes <= u64::MAX as f64).then_some(bytes as u64)
}

#[derive(Clone, Copy)]
enum Scale {
    Times(u128),
    Exponent(i32),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse_to_bytes() {
        assert_eq!(parse_quantity("64Gi"), Some(64 << 30));
        assert_eq!(parse_quantity("512Mi"), Some(512 << 20));
        assert_eq!(parse_quantity("1.5Gi"), Some(3 << 29));
        assert_eq!(parse_quantity("10G"), Some(10_000_000_000));
        assert_eq!(parse_quantity("1k"), Some(1000));
        assert_eq!(parse_quantity("1e3"), Some(1000));
        assert_eq!(parse_quantity("1E"), Some(1_000_000_000_000_000_000));
        assert_eq!(parse_quantity("1073741824"), Some(1 << 30));
        assert_eq!(parse_quantity("1500m"), Some(2), "rounded up like Value()");
        assert_eq!(parse_quantity("Gi"), None);
        assert_eq!(parse_quantity("1Gb"), None);
        assert_eq!(parse_quantity("-1Gi"), None);
        assert_eq!(parse_quantity(""), None);
    }
}
