//! The kubelet's certificates by guest time: their window read with `openssl` in the guest,
//! and their rotation until both last [`MIN_VALIDITY_SECONDS`] (SNC's certificate steps).

use super::*;

/// One kubelet certificate as the guest sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeletCert {
    pub path: &'static str,
    pub issuer: String,
    /// `notAfter` − guest now, seconds.
    pub remaining: i64,
    /// `openssl x509 -checkend` for 25 days passed in the guest.
    pub checkend: bool,
}

impl KubeletCert {
    /// Valid 25 days by guest time, and not issued by the installer's signer.
    pub fn passes(&self, installer_signer: &str) -> bool {
        self.checkend && self.remaining >= MIN_VALIDITY_SECONDS && self.issuer != installer_signer
    }
}

/// Parses `notAfter=Mon DD HH:MM:SS YYYY GMT` (what `openssl x509 -enddate` prints) to unix
/// seconds.
pub fn parse_enddate(line: &str) -> Option<i64> {
    let text = line.trim().strip_prefix("notAfter=")?;
    let parsed = chrono_like(text)?;
    Some(parsed)
}

/// `Mon DD HH:MM:SS YYYY GMT` → unix seconds (UTC), without a date library.
fn chrono_like(text: &str) -> Option<i64> {
    let mut words = text.split_whitespace();
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]
    .iter()
    .position(|m| Some(*m) == words.clone().next())? as i64
        + 1;
    words.next();
    let day: i64 = words.next()?.parse().ok()?;
    let mut hms = words.next()?.split(':').map(|p| p.parse::<i64>().ok());
    let (h, m, s) = (hms.next()??, hms.next()??, hms.next()??);
    let year: i64 = words.next()?.parse().ok()?;
    if words.next() != Some("GMT") {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let (y, mo) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * mo + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + h * 3600 + m * 60 + s)
}

/// A certificate's window in the guest, judged at the guest's `now`: `notAfter` − now in
/// seconds, and whether `openssl x509 -checkend` for 25 days passed there.
pub async fn certificate_window<G: Guest>(
    guest: &G,
    path: &str,
    guest_now: i64,
) -> Result<(i64, bool), Error> {
    let step = "read a certificate's window";
    let checkend = guest
        .run(&Command::sudo([
            "openssl",
            "x509",
            "-noout",
            "-checkend",
            &MIN_VALIDITY_SECONDS.to_string(),
            "-in",
            path,
        ]))
        .await
        .map_err(guest_err(step))?
        .success();
    let enddate = guest
        .run_checked(&Command::sudo([
            "openssl", "x509", "-noout", "-enddate", "-in", path,
        ]))
        .await
        .map_err(guest_err(step))?
        .stdout_text();
    let not_after = parse_enddate(&enddate).ok_or_else(|| {
        Error::NotRotated(format!(
            "{path}: cannot read `openssl x509 -enddate` output {:?}",
            enddate.trim()
        ))
    })?;
    Ok((not_after - guest_now, checkend))
}

/// Reads one kubelet certificate's state in the guest, judged at the guest's `now`.
pub async fn kubelet_cert<G: Guest>(
    guest: &G,
    path: &'static str,
    guest_now: i64,
) -> Result<KubeletCert, Error> {
    let (remaining, checkend) = certificate_window(guest, path, guest_now).await?;
    Ok(KubeletCert {
        path,
        issuer: issuer(guest, path).await?,
        remaining,
        checkend,
    })
}

/// After the cold restart (`docs/design/certificates-and-time.md`, "4. Cold restart"): approves
/// the kubelet's CSRs every `patience.interval` until both kubelet certificates pass the 25-day
/// check by guest time and were issued by a signer other than the installer's.
pub async fn rotate_kubelet_certs(
    guest: &SshGuest,
    client: &kube::Client,
    installer_signer: &str,
    patience: Patience,
) -> Result<[KubeletCert; 2], Error> {
    let deadline = tokio::time::Instant::now() + patience.deadline;
    let single = Patience::new(patience.interval, patience.interval);
    let mut refusals_logged = std::collections::HashSet::new();
    loop {
        // One approval pass; a failing API is the next round's problem (it restarts on its own
        // certificates during this step).
        match tokio::time::timeout(
            REQUEST_TIMEOUT,
            cluster::approve_csrs(client, HOSTNAME, single),
        )
        .await
        {
            Ok(Ok(approvals)) => approvals.log_refusals(&mut refusals_logged),
            Ok(Err(err)) => tracing::debug!("approving CSRs: {err}"),
            Err(_) => tracing::debug!("approving CSRs: no answer"),
        }
        let guest_now = now_unix() + clock_skew(guest).await?;
        let client_cert = kubelet_cert(guest, KUBELET_CLIENT_CERT, guest_now).await?;
        let server_cert = kubelet_cert(guest, KUBELET_SERVER_CERT, guest_now).await?;
        if client_cert.passes(installer_signer) && server_cert.passes(installer_signer) {
            return Ok([client_cert, server_cert]);
        }
        if tokio::time::Instant::now() + patience.interval > deadline {
            let describe = |c: &KubeletCert| {
                format!(
                    "{} {} days left, {}",
                    c.path,
                    c.remaining / 86_400,
                    c.issuer
                )
            };
            return Err(Error::NotRotated(format!(
                "after {} s: {}; {} (installer signer {installer_signer})",
                patience.deadline.as_secs(),
                describe(&client_cert),
                describe(&server_cert)
            )));
        }
        tokio::time::sleep(patience.interval).await;
    }
}
