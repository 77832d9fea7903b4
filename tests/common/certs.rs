//! Certificates made at test time: a CA, servers' certificates for
//! loopback, and clients' certificates, all signed by the CA.

#![allow(dead_code)]

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

/// A certificate authority.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its private key, both PEM.
pub struct Pair {
    pub cert: String,
    pub key: String,
}

impl Ca {
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Self { issuer }
    }

    /// The CA's own certificate, PEM.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A certificate for the daemon on loopback: `localhost` and `127.0.0.1`.
    pub fn server(&self) -> Pair {
        self.sign(vec!["localhost".into(), "127.0.0.1".into()], "stormguard")
    }

    /// A client's certificate.
    pub fn client(&self, name: &str) -> Pair {
        self.sign(Vec::new(), name)
    }

    fn sign(&self, names: Vec<String>, common_name: &str) -> Pair {
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, common_name);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Pair {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }
}
