//! `openssl x509 -noout [-checkend N] [-enddate] [-startdate] [-dates] [-issuer] [-subject]
//! -in PATH`, answered from the state's certificates by path and judged by **guest** time.

use super::{Ctx, Run};
use crate::guest::time;

pub fn openssl(ctx: &mut Ctx<'_>, args: &[String], _stdin: &[u8]) -> Run {
    let Some((sub, args)) = args.split_first() else {
        return Run::fail(1, "openssl: subcommand required");
    };
    if sub != "x509" {
        return Run::fail(1, format!("openssl {sub}: not simulated"));
    }
    let mut input = None;
    let mut checkend = None;
    let mut prints = Vec::new();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "-noout" => {}
            "-in" => input = iter.next().cloned(),
            "-checkend" => match iter.next().and_then(|n| n.parse::<i64>().ok()) {
                Some(n) => checkend = Some(n),
                None => return Run::fail(1, "openssl x509: -checkend needs seconds"),
            },
            "-enddate" | "-startdate" | "-dates" | "-issuer" | "-subject" => {
                prints.push(arg.as_str())
            }
            other => return Run::fail(1, format!("openssl x509: option {other} is not simulated")),
        }
    }
    let Some(input) = input else {
        return Run::fail(
            1,
            "openssl x509: reading certificates from stdin is not simulated; use -in PATH",
        );
    };
    let path = ctx.path(&input);
    if let Err(err) = ctx.read(&path) {
        return Run::fail(
            1,
            format!(
                "Could not open file or uri for loading certificate from {input}: {}",
                err.message()
            ),
        );
    }
    let Some(cert) = ctx.state().certificates.get(&path).cloned() else {
        return Run::fail(
            1,
            format!("Could not read certificate from {input}\nUnable to load certificate"),
        );
    };
    let mut out = String::new();
    for print in prints {
        match print {
            "-enddate" => out.push_str(&format!(
                "notAfter={}\n",
                time::openssl_date(cert.not_after)
            )),
            "-startdate" => out.push_str(&format!(
                "notBefore={}\n",
                time::openssl_date(cert.not_before)
            )),
            "-dates" => out.push_str(&format!(
                "notBefore={}\nnotAfter={}\n",
                time::openssl_date(cert.not_before),
                time::openssl_date(cert.not_after)
            )),
            "-issuer" => out.push_str(&format!("issuer={}\n", cert.issuer)),
            _ => out.push_str(&format!("subject={}\n", cert.subject)),
        }
    }
    match checkend {
        Some(seconds) if cert.not_after <= ctx.now.0 + seconds => {
            out.push_str("Certificate will expire\n");
            Run::out(out).with_code(1)
        }
        Some(_) => {
            out.push_str("Certificate will not expire\n");
            Run::out(out)
        }
        None => Run::out(out),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::{GuestTime, exec};

    const CLIENT: &str = "/var/lib/kubelet/pki/kubelet-client-current.pem";

    #[test]
    fn checkend_uses_guest_time() {
        let mut m = sealed();
        let line = format!("sudo openssl x509 -noout -checkend 2160000 -in {CLIENT}");
        // Issued at NOW for 30 days: 25 more days are fine now…
        let out = exec(&mut m, GuestTime(NOW), "core", &line, b"");
        assert_eq!(
            (out.code, stdout(&out)),
            (0, "Certificate will not expire\n".into())
        );
        // …but not 10 days later.
        let out = exec(&mut m, GuestTime(NOW + 10 * 86_400), "core", &line, b"");
        assert_eq!(
            (out.code, stdout(&out)),
            (1, "Certificate will expire\n".into())
        );
    }

    #[test]
    fn prints_dates_and_needs_read_access() {
        let mut m = sealed();
        let out = run(
            &mut m,
            &format!("sudo openssl x509 -noout -enddate -in {CLIENT}"),
        );
        assert_eq!(stdout(&out), "notAfter=Jan  1 12:23:44 2027 GMT\n");
        let out = run(
            &mut m,
            &format!("openssl x509 -noout -enddate -in {CLIENT}"),
        );
        assert_eq!(out.code, 1);
        assert!(stderr(&out).contains("Permission denied"));
        let out = run(
            &mut m,
            "sudo openssl x509 -noout -enddate -in /etc/os-release",
        );
        assert_eq!(out.code, 1);
        assert!(stderr(&out).contains("Unable to load certificate"));
    }
}
