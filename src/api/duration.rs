//! Durations as the API and the command line take them: Go's `time.ParseDuration` grammar,
//! which Kubernetes uses for both (a lease's `ttl`, a build's `deadline`; every duration flag of
//! its components). One parser, so `15s` means the same in a ClusterLease and in a flag.

use std::time::Duration;

/// A `ttl` that is not a Go duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("empty duration")]
    Empty,
    #[error("invalid duration {0:?}: expected numbers with units such as 2h, 90m or 1h30m")]
    Invalid(String),
    #[error("missing unit in duration {0:?} (use ns, us, ms, s, m or h)")]
    MissingUnit(String),
    #[error("unknown unit {unit:?} in duration {input:?} (use ns, us, ms, s, m or h)")]
    UnknownUnit { unit: String, input: String },
    #[error("duration {0:?} is too large")]
    Overflow(String),
}

/// Parses a Go duration into signed nanoseconds, accepting exactly what Go's `time.ParseDuration`
/// accepts and computing the same value: an optional sign, then a lone `0` or one or more decimal
/// numbers (`1`, `1.5`, `.5`, `1.`) each followed by a unit (`ns`, `us`, `µs`, `μs`, `ms`, `s`,
/// `m`, `h`), within an int64 of nanoseconds. The admission rule of `ttl` accepts the same set.
pub fn go_duration_nanos(input: &str) -> Result<i64, DurationError> {
    // Magnitude of the most negative int64: the bound Go checks while adding up the parts.
    const LIMIT: u64 = 1 << 63;
    const UNITS: [(&str, u64); 8] = [
        ("ns", 1),
        ("us", 1_000),
        ("µs", 1_000),
        ("μs", 1_000),
        ("ms", 1_000_000),
        ("s", 1_000_000_000),
        ("m", 60_000_000_000),
        ("h", 3_600_000_000_000),
    ];
    let invalid = || DurationError::Invalid(input.to_owned());
    let overflow = || DurationError::Overflow(input.to_owned());
    let (negative, mut rest) = match input.as_bytes().first() {
        None => return Err(DurationError::Empty),
        Some(b'-') => (true, &input[1..]),
        Some(b'+') => (false, &input[1..]),
        Some(_) => (false, input),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_part, after) = rest.split_at(int_len);
        let (frac_part, after) = match after.strip_prefix('.') {
            Some(f) => f.split_at(f.bytes().take_while(u8::is_ascii_digit).count()),
            None => ("", after),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(invalid());
        }
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        if unit.is_empty() {
            return Err(DurationError::MissingUnit(input.to_owned()));
        }
        let scale = UNITS
            .iter()
            .find(|(name, _)| *name == unit)
            .map(|(_, scale)| *scale)
            .ok_or_else(|| DurationError::UnknownUnit {
                unit: unit.to_owned(),
                input: input.to_owned(),
            })?;
        let whole = int_part.bytes().try_fold(0u64, |acc, d| {
            acc.checked_mul(10)
                .and_then(|a| a.checked_add(u64::from(d - b'0')))
                .filter(|a| *a <= LIMIT)
        });
        let mut value = whole
            .and_then(|w| w.checked_mul(scale))
            .filter(|v| *v <= LIMIT)
            .ok_or_else(overflow)?;
        // Go adds a fraction in float64 arithmetic, from the digits that fit an int64; doing the
        // same keeps every value equal to Go's, down to the nanosecond.
        let (mut digits, mut divisor) = (0u64, 1f64);
        for d in frac_part.bytes() {
            match digits
                .checked_mul(10)
                .and_then(|x| x.checked_add(u64::from(d - b'0')))
            {
                Some(next) if next <= LIMIT => {
                    digits = next;
                    divisor *= 10.0;
                }
                _ => break,
            }
        }
        if digits > 0 {
            value += (digits as f64 * (scale as f64 / divisor)) as u64;
            if value > LIMIT {
                return Err(overflow());
            }
        }
        total = total
            .checked_add(value)
            .filter(|t| *t <= LIMIT)
            .ok_or_else(overflow)?;
        rest = after;
    }
    if negative {
        // `total` is at most 2^63, so the negation fits an int64.
        return Ok((-i128::from(total)) as i64);
    }
    i64::try_from(total).map_err(|_| overflow())
}

/// A Go duration (see [`go_duration_nanos`]) as a `Duration`. A negative duration is zero: no TTL,
/// as upstream treats `ttl <= 0`.
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let nanos = go_duration_nanos(input)?;
    Ok(Duration::from_nanos(u64::try_from(nanos).unwrap_or(0)))
}

/// A duration flag (`--lease-duration=15s`): Go's grammar, as Kubernetes components parse their
/// duration flags; a negative one is refused.
pub fn parse_flag(text: &str) -> Result<Duration, String> {
    let nanos = go_duration_nanos(text.trim())
        .map_err(|e| format!("{text:?} is not a duration like 15s, 500ms or 1m30s ({e})"))?;
    u64::try_from(nanos)
        .map(Duration::from_nanos)
        .map_err(|_| format!("duration {text:?} is negative"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations() {
        let ok = |s: &str| parse_duration(s).unwrap();
        assert_eq!(ok("2h"), Duration::from_secs(7200));
        assert_eq!(ok("90m"), Duration::from_secs(5400));
        assert_eq!(ok("1h30m"), Duration::from_secs(5400));
        assert_eq!(ok("500ms"), Duration::from_millis(500));
        assert_eq!(ok("10s"), Duration::from_secs(10));
        assert_eq!(ok("1.5h"), Duration::from_secs(5400));
        assert_eq!(ok(".5s"), Duration::from_millis(500));
        assert_eq!(ok("1.s"), Duration::from_secs(1));
        assert_eq!(ok("3us"), Duration::from_micros(3));
        assert_eq!(ok("3µs"), Duration::from_micros(3));
        assert_eq!(ok("7ns"), Duration::from_nanos(7));
        assert_eq!(ok("1h1m1s1ms"), Duration::from_millis(3_661_001));
        assert_eq!(ok("0"), Duration::ZERO);
        assert_eq!(ok("+5s"), Duration::from_secs(5));
        assert_eq!(ok("-5s"), Duration::ZERO, "negative: no TTL");
        assert_eq!(ok("0s"), Duration::ZERO);
    }

    #[test]
    fn rejects_what_go_rejects() {
        assert_eq!(parse_duration(""), Err(DurationError::Empty));
        assert!(matches!(
            parse_duration("5"),
            Err(DurationError::MissingUnit(_))
        ));
        assert!(matches!(
            parse_duration("1h5"),
            Err(DurationError::MissingUnit(_))
        ));
        assert!(matches!(
            parse_duration("5d"),
            Err(DurationError::UnknownUnit { .. })
        ));
        assert!(matches!(
            parse_duration("h"),
            Err(DurationError::Invalid(_))
        ));
        assert!(matches!(
            parse_duration("."),
            Err(DurationError::Invalid(_))
        ));
        assert!(matches!(
            parse_duration("-"),
            Err(DurationError::Invalid(_))
        ));
        assert!(matches!(
            parse_duration("3000000h"),
            Err(DurationError::Overflow(_))
        ));
        assert!(matches!(
            parse_duration("99999999999999999999999999999999999999999s"),
            Err(DurationError::Overflow(_))
        ));
    }

    /// Go 1.26's `time.ParseDuration` on each input: the nanoseconds, or `None` for an error.
    const GO_PARSE_DURATION: &[(&str, Option<i64>)] = &[
        ("0", Some(0)),
        ("+0", Some(0)),
        ("-0", Some(0)),
        ("0s", Some(0)),
        ("0.0s", Some(0)),
        ("00s", Some(0)),
        ("2h", Some(7_200_000_000_000)),
        ("+2h", Some(7_200_000_000_000)),
        ("-2h", Some(-7_200_000_000_000)),
        (".5h", Some(1_800_000_000_000)),
        ("1.h", Some(3_600_000_000_000)),
        ("1.5h", Some(5_400_000_000_000)),
        ("1h30m", Some(5_400_000_000_000)),
        ("90m", Some(5_400_000_000_000)),
        ("500ms", Some(500_000_000)),
        ("1µs", Some(1_000)),
        ("1μs", Some(1_000)),
        ("1us", Some(1_000)),
        ("7ns", Some(7)),
        ("2h0m0s", Some(7_200_000_000_000)),
        ("1h1m1.5s", Some(3_661_500_000_000)),
        ("-.5m", Some(-30_000_000_000)),
        ("3.000000000000000000001s", Some(3_000_000_000)),
        ("9223372036854775807ns", Some(i64::MAX)),
        ("9223372036854775808ns", None),
        ("-9223372036854775808ns", Some(i64::MIN)),
        ("-9223372036854775809ns", None),
        ("2562047h47m16.854775807s", Some(i64::MAX)),
        ("2562047h47m16.854775808s", None),
        ("-2562047h47m16.854775808s", Some(i64::MIN)),
        ("2562047h", Some(9_223_369_200_000_000_000)),
        ("2562048h", None),
        ("9223372036854775808000000000000ns", None),
        ("", None),
        ("+", None),
        ("-", None),
        (".", None),
        (".s", None),
        ("s", None),
        ("h", None),
        ("5", None),
        ("00", None),
        ("1h5", None),
        ("1d", None),
        ("5D", None),
        ("1H", None),
        ("+-1s", None),
        ("--1s", None),
        ("1hm", None),
        ("1e3s", None),
        (" 1s", None),
        ("1s ", None),
        ("1 s", None),
        ("1.2.3s", None),
        ("1..2s", None),
        ("0x10s", None),
        ("1_000s", None),
        ("１s", None),
        ("1µ", None),
        ("1mss", None),
    ];

    #[test]
    fn accepts_and_computes_exactly_what_go_does() {
        for (input, go) in GO_PARSE_DURATION {
            assert_eq!(
                go_duration_nanos(input).ok(),
                *go,
                "{input:?}: {:?}",
                go_duration_nanos(input)
            );
        }
    }

    #[test]
    fn a_flag_takes_what_kubernetes_components_take() {
        let ok = |text, ms| assert_eq!(parse_flag(text), Ok(Duration::from_millis(ms)), "{text}");
        ok("15s", 15_000);
        ok("500ms", 500);
        ok("1m30s", 90_000);
        ok("1h", 3_600_000);
        ok("1.5s", 1_500);
        ok(" 2s ", 2_000);
        for bad in ["", "15", "s", "15 s", "10d"] {
            let err = parse_flag(bad).unwrap_err();
            assert!(err.contains("15s, 500ms or 1m30s"), "{bad}: {err}");
        }
        assert!(parse_flag("-1s").unwrap_err().contains("negative"));
    }
}
