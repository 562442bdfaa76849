//! RFC 3339 rendering of engine times (ms since the Unix epoch, UTC).

use crate::history::Millis;

/// `2026-11-30T05:08:24.123Z`.
pub fn rfc3339(ms: Millis) -> String {
    match stamp(ms) {
        Some(text) => text.iter().copied().map(char::from).collect(),
        None => long_form(ms),
    }
}

/// `ms` as a JSON string of its RFC 3339 rendering, at the end of `out`.
pub fn write_rfc3339(out: &mut Vec<u8>, ms: Millis) {
    out.push(b'"');
    match stamp(ms) {
        Some(text) => out.extend_from_slice(&text),
        None => out.extend_from_slice(long_form(ms).as_bytes()),
    }
    out.push(b'"');
}

/// The rendering of a time in years 0 to 9999, digit by digit (every time
/// an answer shows; `format!` took about a thousand instructions for one).
fn stamp(ms: Millis) -> Option<[u8; 24]> {
    let (y, m, d, rem, millis) = parts(ms);
    let year = u64::try_from(y).ok().filter(|y| *y <= 9999)?;
    let mut text = *b"0000-00-00T00:00:00.000Z";
    let mut put = |at: std::ops::Range<usize>, mut n: u64| {
        for b in text[at].iter_mut().rev() {
            *b = b'0' + (n % 10) as u8;
            n /= 10;
        }
    };
    put(0..4, year);
    put(5..7, m.into());
    put(8..10, d.into());
    put(11..13, rem / 3600);
    put(14..16, (rem % 3600) / 60);
    put(17..19, rem % 60);
    put(20..23, millis);
    Some(text)
}

/// Any time, with as many digits of year as it takes.
fn long_form(ms: Millis) -> String {
    let (y, m, d, rem, millis) = parts(ms);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Year, month, day, seconds into the day and milliseconds of `ms`.
fn parts(ms: Millis) -> (i64, u32, u32, u64, u64) {
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let (y, m, d) = civil_from_days(days);
    (y, m, d, secs % 86_400, ms % 1000)
}

/// Howard Hinnant's days-to-civil algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::{long_form, rfc3339, write_rfc3339};

    #[test]
    fn renders_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_709_251_199_999), "2024-02-29T23:59:59.999Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339(253_402_300_799_999), "9999-12-31T23:59:59.999Z");
        assert_eq!(rfc3339(253_402_300_800_000), "10000-01-01T00:00:00.000Z");
    }

    #[test]
    fn digit_by_digit_is_the_long_form() {
        let mut ms: u64 = 7;
        while ms < u64::MAX / 3 {
            assert_eq!(rfc3339(ms), long_form(ms), "{ms}");
            let mut out = Vec::new();
            write_rfc3339(&mut out, ms);
            assert_eq!(out, format!("\"{}\"", long_form(ms)).into_bytes());
            ms = ms * 3 + 1;
        }
    }
}
