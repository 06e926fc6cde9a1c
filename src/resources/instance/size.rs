//! Root disk sizing (`docs/operations.md`, "Provisioning, in order"): `rootVolumeSize` (default
//! 80Gi) is at least the golden disk's virtual size plus the filesystem overhead; a smaller size
//! is raised to a whole Gi and the caller says so with an Event.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::Error;
use crate::api::template::DEFAULT_CRC_ROOT_VOLUME_SIZE;

const GI: u128 = 1 << 30;

/// A root disk size raised to fit the golden disk.
#[derive(Clone, Debug, PartialEq)]
pub struct Raised {
    /// The size asked for (`rootVolumeSize`, or the default).
    pub requested: Quantity,
    /// The size used instead.
    pub raised_to: Quantity,
    /// The golden disk's virtual size in bytes.
    pub golden_virtual_size_bytes: u64,
    /// The smallest size that holds the golden disk with the filesystem overhead, in bytes.
    pub minimum_bytes: u64,
}

impl Raised {
    /// The text of the Event announcing the raise.
    pub fn message(&self) -> String {
        format!(
            "rootVolumeSize {} is smaller than the golden disk (virtual size {} bytes, {} bytes \
             with filesystem overhead); using {}",
            self.requested.0, self.golden_virtual_size_bytes, self.minimum_bytes, self.raised_to.0
        )
    }
}

/// The root disk size of an instance: `requested` (`template.rootVolumeSize`; empty or absent
/// means 80Gi), raised when smaller than the golden disk's virtual size divided by
/// `1 - filesystem_overhead` (CDI's rule; pass 0 for Block volumes) to that size rounded up to a
/// whole Gi. The second value is `Some` exactly when the size was raised.
pub fn root_disk_size(
    requested: Option<&str>,
    golden_virtual_size_bytes: Option<u64>,
    filesystem_overhead: f64,
) -> Result<(Quantity, Option<Raised>), Error> {
    let requested = requested
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .unwrap_or(DEFAULT_CRC_ROOT_VOLUME_SIZE);
    let requested_bytes = parse_quantity_bytes(requested)?;
    let requested = Quantity(requested.to_owned());
    let Some(golden) = golden_virtual_size_bytes else {
        return Ok((requested, None));
    };
    if !(0.0..1.0).contains(&filesystem_overhead) {
        return Err(Error::InvalidFilesystemOverhead(filesystem_overhead));
    }
    let minimum = minimum_bytes(golden, filesystem_overhead);
    if requested_bytes >= u128::from(minimum) {
        return Ok((requested, None));
    }
    let raised_to = Quantity(format!("{}Gi", u128::from(minimum).div_ceil(GI)));
    Ok((
        raised_to.clone(),
        Some(Raised {
            requested,
            raised_to,
            golden_virtual_size_bytes: golden,
            minimum_bytes: minimum,
        }),
    ))
}

/// `ceil(virtual / (1 - overhead))`, computed in parts per million so that the result does not
/// depend on float rounding of large byte counts.
fn minimum_bytes(virtual_size: u64, overhead: f64) -> u64 {
    const PPM: u128 = 1_000_000;
    // Rounded up so that the usable space is never overestimated.
    let overhead_ppm = ((overhead * PPM as f64).ceil() as u128).min(PPM - 1);
    let minimum = (u128::from(virtual_size) * PPM).div_ceil(PPM - overhead_ppm);
    u64::try_from(minimum).unwrap_or(u64::MAX)
}

/// Bytes of a Kubernetes quantity (`80Gi`, `35G`, `1.5Ti`, `500M`, `1e9`, `107374182400`),
/// rounded up to a whole byte. Binary (`Ki`…`Ei`) and decimal (`k`, `M`…`E`, `m`) suffixes and
/// decimal exponents are accepted; negative values are not.
pub fn parse_quantity_bytes(text: &str) -> Result<u128, Error> {
    let invalid = || Error::InvalidQuantity(text.to_owned());
    let s = text.trim();
    let s = s.strip_prefix('+').unwrap_or(s);
    let number_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() {
        return Err(invalid());
    }
    // value = mantissa / 10^fraction_digits × multiplier, kept as numerator / denominator.
    let digits = format!("{whole}{fraction}");
    let mut numerator: u128 = digits.parse().map_err(|_| invalid())?;
    let mut denominator: u128 = 10u128
        .checked_pow(u32::try_from(fraction.len()).map_err(|_| invalid())?)
        .ok_or_else(invalid)?;
    let (multiplier, divisor): (u128, u128) = match suffix {
        "" => (1, 1),
        "Ki" => (1 << 10, 1),
        "Mi" => (1 << 20, 1),
        "Gi" => (1 << 30, 1),
        "Ti" => (1 << 40, 1),
        "Pi" => (1 << 50, 1),
        "Ei" => (1 << 60, 1),
        "m" => (1, 1000),
        "k" => (1_000, 1),
        "M" => (1_000_000, 1),
        "G" => (1_000_000_000, 1),
        "T" => (1_000_000_000_000, 1),
        "P" => (1_000_000_000_000_000, 1),
        "E" => (1_000_000_000_000_000_000, 1),
        exponent if exponent.starts_with(['e', 'E']) => {
            let exponent: i32 = exponent[1..].parse().map_err(|_| invalid())?;
            let power = 10u128
                .checked_pow(exponent.unsigned_abs())
                .ok_or_else(invalid)?;
            if exponent >= 0 {
                (power, 1)
            } else {
                (1, power)
            }
        }
        _ => return Err(invalid()),
    };
    numerator = numerator.checked_mul(multiplier).ok_or_else(invalid)?;
    denominator = denominator.checked_mul(divisor).ok_or_else(invalid)?;
    Ok(numerator.div_ceil(denominator))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn quantities_parse_to_bytes() {
        let cases: &[(&str, u128)] = &[
            ("80Gi", 80 * (1 << 30)),
            ("35Gi", 35 * (1 << 30)),
            ("1Ki", 1024),
            ("512Mi", 512 << 20),
            ("2Ti", 2 << 40),
            ("1Pi", 1 << 50),
            ("1Ei", 1 << 60),
            ("1.5Gi", 3 << 29),
            ("0.5Ki", 512),
            ("1k", 1000),
            ("500M", 500_000_000),
            ("35G", 35_000_000_000),
            ("1T", 1_000_000_000_000),
            ("1P", 1_000_000_000_000_000),
            ("2E", 2_000_000_000_000_000_000),
            ("107374182400", 107_374_182_400),
            ("1e9", 1_000_000_000),
            ("1E3", 1000),
            ("15e-1", 2),
            ("1500m", 2),
            ("1000m", 1),
            (".5k", 500),
            ("3.", 3),
            (" 4Gi ", 4 << 30),
            ("+1Ki", 1024),
            ("0", 0),
        ];
        for (text, bytes) in cases {
            assert_eq!(parse_quantity_bytes(text).unwrap(), *bytes, "{text}");
        }
    }

    #[test]
    fn malformed_quantities_are_errors() {
        for text in [
            "", "Gi", "-1Gi", "1gi", "1 Gi", "1.2.3", "abc", "1Gib", "1e", "1e999", "1KI", ".",
        ] {
            assert!(
                matches!(parse_quantity_bytes(text), Err(Error::InvalidQuantity(_))),
                "{text:?} should not parse"
            );
        }
    }

    #[test]
    fn default_size_is_80gi() {
        assert_eq!(
            root_disk_size(None, None, 0.0).unwrap(),
            (Quantity("80Gi".into()), None)
        );
        assert_eq!(
            root_disk_size(Some(""), Some(31 * GIB), 0.055).unwrap(),
            (Quantity("80Gi".into()), None)
        );
    }

    #[test]
    fn a_big_enough_request_is_kept_as_written() {
        assert_eq!(
            root_disk_size(Some("120G"), Some(31 * GIB), 0.055).unwrap(),
            (Quantity("120G".into()), None)
        );
        // Exactly the golden size on Block storage is enough.
        assert_eq!(
            root_disk_size(Some("31Gi"), Some(31 * GIB), 0.0).unwrap(),
            (Quantity("31Gi".into()), None)
        );
    }

    #[test]
    fn a_small_request_is_raised_to_a_whole_gi() {
        let (size, raised) = root_disk_size(Some("20Gi"), Some(31 * GIB), 0.0).unwrap();
        assert_eq!(size, Quantity("31Gi".into()));
        let raised = raised.unwrap();
        assert_eq!(raised.requested, Quantity("20Gi".into()));
        assert_eq!(raised.raised_to, size);
        assert_eq!(raised.minimum_bytes, 31 * GIB);
        assert!(raised.message().contains("rootVolumeSize 20Gi"));
        assert!(raised.message().contains("using 31Gi"));

        // Filesystem overhead: 31Gi / (1 - 0.055) = 32.80…Gi → 33Gi.
        let (size, raised) = root_disk_size(Some("31Gi"), Some(31 * GIB), 0.055).unwrap();
        assert_eq!(size, Quantity("33Gi".into()));
        let minimum = raised.unwrap().minimum_bytes;
        assert!(minimum as f64 * (1.0 - 0.055) >= (31 * GIB) as f64);

        // A virtual size that is not a whole Gi rounds up.
        let (size, _) = root_disk_size(Some("1Gi"), Some(31 * GIB + 1), 0.0).unwrap();
        assert_eq!(size, Quantity("32Gi".into()));
    }

    #[test]
    fn the_default_is_raised_too() {
        let (size, raised) = root_disk_size(None, Some(100 * GIB), 0.0).unwrap();
        assert_eq!(size, Quantity("100Gi".into()));
        assert_eq!(raised.unwrap().requested, Quantity("80Gi".into()));
    }

    #[test]
    fn bad_inputs_are_errors() {
        assert!(matches!(
            root_disk_size(Some("lots"), None, 0.0),
            Err(Error::InvalidQuantity(q)) if q == "lots"
        ));
        assert!(matches!(
            root_disk_size(None, Some(GIB), 1.0),
            Err(Error::InvalidFilesystemOverhead(_))
        ));
        assert!(matches!(
            root_disk_size(None, Some(GIB), -0.1),
            Err(Error::InvalidFilesystemOverhead(_))
        ));
        assert!(root_disk_size(None, Some(GIB), f64::NAN).is_err());
    }
}
