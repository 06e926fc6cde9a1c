//! Progress lines of the long steps (download, hashing, extraction), for the Job's log.

/// Progress lines at every tenth of a known total, or every GiB.
pub struct Progress {
    total: Option<u64>,
    last_mark: u64,
}

impl Progress {
    /// Starting at `done` bytes (a resumed transfer).
    pub fn new(total: Option<u64>, done: u64) -> Progress {
        let mut progress = Progress {
            total,
            last_mark: 0,
        };
        progress.last_mark = progress.mark(done);
        progress
    }

    fn mark(&self, done: u64) -> u64 {
        match self.total {
            Some(0) => 10,
            Some(total) => u64::try_from(u128::from(done) * 10 / u128::from(total)).unwrap_or(10),
            None => done >> 30,
        }
    }

    /// A line when `done` has crossed the next mark.
    pub fn update(&mut self, done: u64) -> Option<String> {
        let mark = self.mark(done);
        if mark <= self.last_mark {
            return None;
        }
        self.last_mark = mark;
        Some(match self.total {
            Some(total) if total > 0 => format!(
                "{done} of {total} bytes ({}%)",
                u128::from(done) * 100 / u128::from(total)
            ),
            _ => format!("{done} bytes"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_reports_each_tenth_once() {
        let mut progress = Progress::new(Some(1000), 0);
        let lines: Vec<String> = [50, 100, 150, 420, 999, 1000]
            .into_iter()
            .filter_map(|done| progress.update(done))
            .collect();
        assert_eq!(
            lines,
            [
                "100 of 1000 bytes (10%)",
                "420 of 1000 bytes (42%)",
                "999 of 1000 bytes (99%)",
                "1000 of 1000 bytes (100%)"
            ]
        );
        let mut resumed = Progress::new(Some(1000), 550);
        assert_eq!(resumed.update(560), None);
        assert!(resumed.update(600).is_some());
        let mut unknown = Progress::new(None, 0);
        assert_eq!(unknown.update(1 << 29), None);
        assert_eq!(unknown.update(1 << 30).as_deref(), Some("1073741824 bytes"));
    }
}
