//! Tests of the daemon's TLS: pairs loaded with and without client certificates, unusable files
//! named, a changed pair served.

use super::*;

#[path = "../../tests/common/certs.rs"]
mod certs;

use certs::{Ca, Pair};

struct Files {
    dir: tempfile::TempDir,
    files: TlsFiles,
}

impl Files {
    fn new(pair: &Pair, client_ca: Option<&Ca>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let files = TlsFiles {
            cert: dir.path().join("tls.crt"),
            key: dir.path().join("tls.key"),
            client_ca: client_ca.map(|_| dir.path().join("ca.crt")),
        };
        let this = Self { dir, files };
        this.write(pair);
        if let Some(ca) = client_ca {
            std::fs::write(this.dir.path().join("ca.crt"), ca.pem()).unwrap();
        }
        this
    }

    /// Replaces both files the way the kubelet does: each by a rename.
    fn write(&self, pair: &Pair) {
        for (path, text) in [(&self.files.key, &pair.key), (&self.files.cert, &pair.cert)] {
            let fresh = path.with_extension("new");
            std::fs::write(&fresh, text).unwrap();
            std::fs::rename(fresh, path).unwrap();
        }
    }
}

fn served(tls: &Tls) -> Arc<ServerConfig> {
    tls.config.load_full()
}

#[test]
fn a_pair_loads_with_and_without_client_certificates() {
    let ca = Ca::new("test CA");
    assert!(Tls::load(Files::new(&ca.server(), None).files).is_ok());
    let mutual = Files::new(&ca.server(), Some(&ca));
    assert!(Tls::load(mutual.files.clone()).is_ok());
}

#[test]
fn each_unusable_file_is_named_with_what_is_wrong() {
    let ca = Ca::new("test CA");
    let good = Files::new(&ca.server(), None);

    let mut missing = good.files.clone();
    missing.cert = good.dir.path().join("absent.crt");
    let error = Tls::load(missing).err().unwrap().to_string();
    assert!(
        error.contains("absent.crt") && error.contains("No such file"),
        "{error}"
    );

    let key_as_cert = TlsFiles {
        cert: good.files.key.clone(),
        ..good.files.clone()
    };
    let error = Tls::load(key_as_cert).err().unwrap().to_string();
    assert!(error.contains("tls.key: no CERTIFICATE block"), "{error}");

    let cert_as_key = TlsFiles {
        key: good.files.cert.clone(),
        ..good.files.clone()
    };
    let error = Tls::load(cert_as_key).err().unwrap().to_string();
    assert!(error.contains("tls.crt: no private key"), "{error}");

    let other = Files::new(&ca.server(), None);
    let mismatched = TlsFiles {
        key: other.files.key.clone(),
        ..good.files.clone()
    };
    let error = Tls::load(mismatched).err().unwrap().to_string();
    assert!(
        error.contains("tls.crt with") && error.contains("tls.key:"),
        "names both files: {error}"
    );

    let leaf_as_ca = TlsFiles {
        client_ca: Some(good.files.key.clone()),
        ..good.files.clone()
    };
    let error = Tls::load(leaf_as_ca).err().unwrap().to_string();
    assert!(error.contains("tls.key"), "{error}");
}

#[test]
fn a_changed_pair_is_served_and_a_bad_one_keeps_the_pair_in_use() {
    let ca = Ca::new("test CA");
    let files = Files::new(&ca.server(), None);
    let tls = Tls::load(files.files.clone()).unwrap();
    let mut seen = stamps(&files.files);
    let first = served(&tls);

    tls.check_files(&mut seen);
    assert!(Arc::ptr_eq(&first, &served(&tls)), "unchanged files: no reload");

    files.write(&ca.server());
    tls.check_files(&mut seen);
    let second = served(&tls);
    assert!(!Arc::ptr_eq(&first, &second), "the new pair is served");
    assert_eq!(tls.reloads.count("success"), 1);

    std::fs::write(&files.files.key, "not a key").unwrap();
    tls.check_files(&mut seen);
    assert!(
        Arc::ptr_eq(&second, &served(&tls)),
        "a bad key keeps the pair in use"
    );
    assert_eq!(tls.reloads.count("failure"), 1);
    tls.check_files(&mut seen);
    assert_eq!(
        tls.reloads.count("failure"),
        1,
        "a bad file is reported once, not at every look"
    );
}
