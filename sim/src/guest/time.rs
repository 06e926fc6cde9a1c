//! Guest time: host time + the VM's clock offset + in-guest adjustments, and the calendar
//! formatting `date` and `openssl` print (UTC only; guests run in UTC).

use std::time::{SystemTime, UNIX_EPOCH};

/// A guest's wall clock reading, unix seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct GuestTime(pub i64);

/// The host's wall clock, unix seconds.
pub fn host_now() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
    }
}

/// A broken-down UTC time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Civil {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    /// 0 = Sunday.
    pub weekday: u32,
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];
const WEEKDAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];

/// Unix seconds to a UTC calendar time (Howard Hinnant's `civil_from_days`).
pub fn civil(unix: i64) -> Civil {
    let days = unix.div_euclid(86_400);
    let secs = unix.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    Civil {
        year,
        month: month as u32,
        day: day as u32,
        hour: (secs / 3600) as u32,
        minute: (secs % 3600 / 60) as u32,
        second: (secs % 60) as u32,
        // 1970-01-01 was a Thursday.
        weekday: (days + 4).rem_euclid(7) as u32,
    }
}

/// `date` without arguments: `Wed Dec  2 12:23:44 UTC 2026`.
pub fn date_default(unix: i64) -> String {
    let c = civil(unix);
    format!(
        "{} {} {:>2} {:02}:{:02}:{:02} UTC {}",
        WEEKDAYS[c.weekday as usize],
        MONTHS[(c.month - 1) as usize],
        c.day,
        c.hour,
        c.minute,
        c.second,
        c.year
    )
}

/// OpenSSL's `notAfter=` format: `Dec  2 12:23:44 2026 GMT`.
pub fn openssl_date(unix: i64) -> String {
    let c = civil(unix);
    format!(
        "{} {:>2} {:02}:{:02}:{:02} {} GMT",
        MONTHS[(c.month - 1) as usize],
        c.day,
        c.hour,
        c.minute,
        c.second,
        c.year
    )
}

/// The journal's short timestamp: `Dec 02 12:23:44`.
pub fn journal_date(unix: i64) -> String {
    let c = civil(unix);
    format!(
        "{} {:02} {:02}:{:02}:{:02}",
        MONTHS[(c.month - 1) as usize],
        c.day,
        c.hour,
        c.minute,
        c.second
    )
}

/// `date +FORMAT` for the conversions scripts use; `None` for an unsupported one.
pub fn strftime(unix: i64, format: &str) -> Option<String> {
    let c = civil(unix);
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(ch) = chars.next() {
        if ch != '%' {
            out.push(ch);
            continue;
        }
        match chars.next()? {
            's' => out.push_str(&unix.to_string()),
            'Y' => out.push_str(&c.year.to_string()),
            'm' => out.push_str(&format!("{:02}", c.month)),
            'd' => out.push_str(&format!("{:02}", c.day)),
            'H' => out.push_str(&format!("{:02}", c.hour)),
            'M' => out.push_str(&format!("{:02}", c.minute)),
            'S' => out.push_str(&format!("{:02}", c.second)),
            'F' => out.push_str(&format!("{}-{:02}-{:02}", c.year, c.month, c.day)),
            'T' => out.push_str(&format!("{:02}:{:02}:{:02}", c.hour, c.minute, c.second)),
            'Z' => out.push_str("UTC"),
            '%' => out.push('%'),
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_matches_known_dates() {
        assert_eq!(
            civil(0),
            Civil {
                year: 1970,
                month: 1,
                day: 1,
                hour: 0,
                minute: 0,
                second: 0,
                weekday: 4
            }
        );
        // 2026-12-02T12:23:44Z, a Wednesday.
        let c = civil(1_796_214_224);
        assert_eq!((c.year, c.month, c.day), (2026, 12, 2));
        assert_eq!((c.hour, c.minute, c.second, c.weekday), (12, 23, 44, 3));
        // 2000-02-29 (leap day).
        let c = civil(951_782_400);
        assert_eq!((c.year, c.month, c.day), (2000, 2, 29));
    }

    #[test]
    fn formats_like_date_and_openssl() {
        assert_eq!(date_default(1_796_214_224), "Wed Dec  2 12:23:44 UTC 2026");
        assert_eq!(openssl_date(1_796_214_224), "Dec  2 12:23:44 2026 GMT");
        assert_eq!(journal_date(1_796_214_224), "Dec 02 12:23:44");
        assert_eq!(
            strftime(1_796_214_224, "%F %T %s %%").as_deref(),
            Some("2026-12-02 12:23:44 1796214224 %")
        );
        assert_eq!(strftime(0, "%q"), None);
    }
}
