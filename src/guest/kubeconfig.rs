//! The guest's `/opt/kubeconfig`, read and rewritten by the crc-agent (the client-CA bootstrap
//! and the Route kubeconfig: `docs/architecture.md`, "The crc-agent"). Fields we do not touch are
//! kept as they are: the document is handled as a JSON value, not a typed struct that would drop
//! what it does not know.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Map, Value};

const CA_DATA: &str = "certificate-authority-data";
const CERT_DATA: &str = "client-certificate-data";
const KEY_DATA: &str = "client-key-data";
const CERT_FILE: &str = "client-certificate";
const KEY_FILE: &str = "client-key";

/// Why a kubeconfig could not be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubeconfig is not YAML: {0}")]
    Parse(String),
    #[error("kubeconfig could not be rendered: {0}")]
    Render(String),
    #[error("kubeconfig has no clusters")]
    NoClusters,
    #[error("kubeconfig has no users")]
    NoUsers,
    #[error("kubeconfig {0} is missing")]
    Missing(&'static str),
    #[error("kubeconfig {field} is not base64 PEM: {reason}")]
    Data { field: &'static str, reason: String },
}

/// A parsed kubeconfig.
#[derive(Clone, PartialEq)]
pub struct Kubeconfig(Value);

// It holds a client key: `{:?}` shows the shape, never the data.
impl std::fmt::Debug for Kubeconfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kubeconfig")
            .field("clusters", &self.cluster_count())
            .field("users", &self.0["users"].as_array().map_or(0, Vec::len))
            .finish_non_exhaustive()
    }
}

/// The cluster, user and context names of a kubeconfig the operator makes (the guest's
/// `/opt/kubeconfig` uses the same).
const CLUSTER: &str = "crc";
const USER: &str = "admin";

impl Kubeconfig {
    /// The kubeconfig an instance publishes, made from nothing but the instance's identity and
    /// its Route host: one cluster at `https://<host>:443` trusting the identity's serving
    /// certificate, one user with the identity's client certificate, one context. Nothing the
    /// guest wrote reaches it, so no `exec`, `auth-provider`, token or other server can.
    pub fn for_route(host: &str, identity: &crate::identity::Identity) -> Self {
        let b64 = |pem: &str| Value::String(BASE64.encode(pem.as_bytes()));
        Self(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": CLUSTER, "cluster": {
                "server": format!("https://{host}:443"),
                CA_DATA: b64(&identity.serving_crt),
            }}],
            "users": [{"name": USER, "user": {
                CERT_DATA: b64(&identity.client_crt),
                KEY_DATA: b64(&identity.client_key),
            }}],
            "contexts": [{"name": USER, "context": {"cluster": CLUSTER, "user": USER}}],
            "current-context": USER,
            "preferences": {},
        }))
    }

    pub fn parse(text: &str) -> Result<Self, Error> {
        // The parser's message and position, never its snippet of the input: that would quote
        // the client key or a token into a log or a condition.
        let value: Value = serde_saphyr::from_str(text)
            .map_err(|e| Error::Parse(e.without_snippet().to_string()))?;
        if !value.is_object() {
            return Err(Error::Parse("the document is not a mapping".into()));
        }
        Ok(Self(value))
    }

    pub fn to_yaml(&self) -> Result<String, Error> {
        serde_saphyr::to_string(&self.0).map_err(|e| Error::Render(e.to_string()))
    }

    pub fn value(&self) -> &Value {
        &self.0
    }

    /// Number of `clusters` entries (the CA bootstrap waits for at least one).
    pub fn cluster_count(&self) -> usize {
        self.0["clusters"].as_array().map_or(0, Vec::len)
    }

    /// `clusters[0].cluster.certificate-authority-data`, decoded: the guest API server's CA.
    pub fn server_ca(&self) -> Result<String, Error> {
        let cluster = self.0["clusters"]
            .get(0)
            .ok_or(Error::NoClusters)?
            .get("cluster")
            .ok_or(Error::Missing("clusters[0].cluster"))?;
        decode_field(
            cluster,
            CA_DATA,
            "clusters[0].cluster.certificate-authority-data",
        )
    }

    /// `users[0].user` client certificate and key data, decoded (PEM).
    pub fn client_credentials(&self) -> Result<(String, String), Error> {
        let user = self.0["users"]
            .get(0)
            .ok_or(Error::NoUsers)?
            .get("user")
            .ok_or(Error::Missing("users[0].user"))?;
        Ok((
            decode_field(user, CERT_DATA, "users[0].user.client-certificate-data")?,
            decode_field(user, KEY_DATA, "users[0].user.client-key-data")?,
        ))
    }

    /// `users[0].user` authenticates with this certificate and key (inline data; file references
    /// are dropped since they would win over the data in some clients).
    pub fn set_client(&mut self, cert_pem: &str, key_pem: &str) -> Result<(), Error> {
        let user = self
            .0
            .get_mut("users")
            .and_then(|users| users.get_mut(0))
            .ok_or(Error::NoUsers)?;
        let user = object_entry(user, "user");
        user.remove(CERT_FILE);
        user.remove(KEY_FILE);
        user.insert(
            CERT_DATA.into(),
            Value::String(BASE64.encode(cert_pem.as_bytes())),
        );
        user.insert(
            KEY_DATA.into(),
            Value::String(BASE64.encode(key_pem.as_bytes())),
        );
        Ok(())
    }
}

/// `parent[key]` as a mapping, replacing anything else there.
fn object_entry<'a>(parent: &'a mut Value, key: &str) -> &'a mut Map<String, Value> {
    if !parent.is_object() {
        *parent = Value::Object(Map::new());
    }
    let map = parent.as_object_mut().expect("made an object above");
    let entry = map
        .entry(key.to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    entry.as_object_mut().expect("made an object above")
}

fn decode_field(parent: &Value, key: &str, field: &'static str) -> Result<String, Error> {
    let text = parent
        .get(key)
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .ok_or(Error::Missing(field))?;
    let bytes = super::decode_base64(text).map_err(|e| Error::Data {
        field,
        reason: e.to_string(),
    })?;
    String::from_utf8(bytes).map_err(|_| Error::Data {
        field,
        reason: "not UTF-8".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(text: &str) -> String {
        BASE64.encode(text.as_bytes())
    }

    fn sealed() -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    certificate-authority-data: {}\n    server: https://api-int.crc.testing:6443\n  name: crc\n- cluster:\n    certificate-authority: /etc/ca.crt\n    insecure-skip-tls-verify: true\n    server: https://other:6443\n  name: other\ncontexts:\n- context:\n    cluster: crc\n    user: admin\n  name: admin\ncurrent-context: admin\nusers:\n- name: admin\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n    client-certificate: /etc/old.crt\n",
            b64("SERVER CA"),
            b64("OLD CERT"),
            b64("OLD KEY")
        )
    }

    #[test]
    fn reads_server_ca_and_client() {
        let kc = Kubeconfig::parse(&sealed()).unwrap();
        assert_eq!(kc.cluster_count(), 2);
        assert_eq!(kc.server_ca().unwrap(), "SERVER CA");
        assert_eq!(
            kc.client_credentials().unwrap(),
            ("OLD CERT".to_string(), "OLD KEY".to_string())
        );
    }

    #[test]
    fn set_client_replaces_data_and_drops_files() {
        let mut kc = Kubeconfig::parse(&sealed()).unwrap();
        kc.set_client("NEW CERT", "NEW KEY").unwrap();
        let back = Kubeconfig::parse(&kc.to_yaml().unwrap()).unwrap();
        assert_eq!(
            back.client_credentials().unwrap(),
            ("NEW CERT".to_string(), "NEW KEY".to_string())
        );
        assert!(back.value()["users"][0]["user"].get(CERT_FILE).is_none());
        assert_eq!(back.value()["users"][0]["name"], "admin");
        assert_eq!(back.server_ca().unwrap(), "SERVER CA", "clusters untouched");
        assert_eq!(back.value()["current-context"], "admin");
    }

    #[test]
    fn a_parse_error_never_quotes_the_kubeconfig() {
        let secret = "client-key-data: c2VjcmV0LWtleS1tYXRlcmlhbA==";
        for broken in [
            format!("users:\n- user:\n    {secret}\n  \t- [unclosed"),
            format!("{secret}\n: : :\n\"unterminated"),
            format!("- {secret}\n"),
        ] {
            let err = Kubeconfig::parse(&broken).unwrap_err().to_string();
            assert!(
                !err.contains("c2VjcmV0"),
                "the error quotes its input: {err}"
            );
        }
    }

    #[test]
    fn empty_or_partial_kubeconfigs_are_errors() {
        let kc = Kubeconfig::parse("apiVersion: v1\nclusters: []\n").unwrap();
        assert_eq!(kc.cluster_count(), 0);
        assert!(matches!(kc.server_ca(), Err(Error::NoClusters)));
        assert!(matches!(kc.client_credentials(), Err(Error::NoUsers)));
        let kc = Kubeconfig::parse("clusters:\n- cluster:\n    server: x\n").unwrap();
        assert!(matches!(kc.server_ca(), Err(Error::Missing(_))));
        assert!(Kubeconfig::parse("- a\n- b\n").is_err());
        assert!(Kubeconfig::parse("").is_err());
    }

    #[test]
    fn bad_base64_is_a_data_error() {
        let kc =
            Kubeconfig::parse("clusters:\n- cluster:\n    certificate-authority-data: '!!!'\n")
                .unwrap();
        assert!(matches!(kc.server_ca(), Err(Error::Data { .. })));
    }
}
