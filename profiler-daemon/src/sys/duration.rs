//! Durations as users write them (`30s`, `5m`, `1h`, `250ms`), on the command line, in the
//! service's configuration and in control-socket requests alike.
use std::time::Duration;

/// Why a text is not a duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("\"{0}\" is not a duration: use e.g. 30s, 5m, 1h, 500ms")]
    NotANumber(String),
    #[error("\"{text}\": unknown unit \"{unit}\"; use ms, s, m or h")]
    UnknownUnit { text: String, unit: String },
    #[error("\"{0}\": the duration must be positive")]
    NotPositive(String),
    /// Found by the fuzzer: a 34-digit number of seconds overflows `Duration` (a panic once,
    /// and the control socket passes durations from any local user).
    #[error("\"{0}\": too long")]
    TooLong(String),
}

/// Like [`parse_duration`], but `0` is allowed (meaning "never").
pub fn parse_duration_or_zero(s: &str) -> Result<Duration, DurationError> {
    if s.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    parse_duration(s)
}

/// Parses `30s`, `5m`, `1h`, `250ms`, or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, "s"),
    };
    let Ok(v) = num.parse::<f64>() else {
        return Err(DurationError::NotANumber(s.into()));
    };
    let secs = match unit {
        "ms" => v / 1000.0,
        "s" => v,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        _ => {
            return Err(DurationError::UnknownUnit {
                text: s.into(),
                unit: unit.into(),
            });
        }
    };
    if !(secs.is_finite() && secs > 0.0) {
        return Err(DurationError::NotPositive(s.into()));
    }
    Duration::try_from_secs_f64(secs).or(Err(DurationError::TooLong(s.into())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert!(parse_duration("0s").is_err());
        assert!(
            parse_duration("ten")
                .unwrap_err()
                .to_string()
                .contains("\"ten\"")
        );
        assert!(
            parse_duration("3d")
                .unwrap_err()
                .to_string()
                .contains("unknown unit")
        );
        // fuzz/corpus/procfs/regression-duration-overflow: once a panic.
        assert_eq!(
            parse_duration("2777777777777777777777777777777777"),
            Err(DurationError::TooLong(
                "2777777777777777777777777777777777".into()
            ))
        );
        assert_eq!(
            parse_duration("2777777777777777777777777777777777")
                .unwrap_err()
                .to_string(),
            "\"2777777777777777777777777777777777\": too long"
        );
        assert!(parse_duration("99999999999999999999999h").is_err());
    }
}
