//! Tests of the connection to the daemon: the token read at each send and followed as it rotates,
//! and TLS clients built from a CA and a client certificate.

use super::*;

fn credential(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../clients/credentials")
        .join(name)
}

fn sent_token(tokens: &TokenFile) -> Option<String> {
    let request = tokens.authorize(reqwest::Client::new().post("http://127.0.0.1:9/v1/reports"));
    let header = request.build().unwrap().headers().get("authorization").cloned();
    header.map(|h| h.to_str().unwrap().to_string())
}

#[test]
fn the_token_is_read_at_each_send_and_follows_a_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, "first-token\n").unwrap();
    let tokens = TokenFile::new(Some(file.clone()));
    assert_eq!(sent_token(&tokens).as_deref(), Some("Bearer first-token"));
    std::fs::write(&file, "rotated-token").unwrap();
    assert_eq!(sent_token(&tokens).as_deref(), Some("Bearer rotated-token"));
}

#[test]
fn without_a_readable_token_the_request_goes_as_it_is() {
    assert_eq!(sent_token(&TokenFile::new(None)), None);
    let dir = tempfile::tempdir().unwrap();
    let missing = TokenFile::new(Some(dir.path().join("absent")));
    assert_eq!(sent_token(&missing), None);
    assert!(missing.last_error.lock().unwrap().is_some());
    std::fs::write(dir.path().join("absent"), "  \n").unwrap();
    assert_eq!(sent_token(&missing), None, "an empty file is no token");
    std::fs::write(dir.path().join("absent"), "two words").unwrap();
    assert_eq!(sent_token(&missing), None, "a header cannot carry it");
    std::fs::write(dir.path().join("absent"), "now-there").unwrap();
    assert_eq!(sent_token(&missing).as_deref(), Some("Bearer now-there"));
    assert!(missing.last_error.lock().unwrap().is_none());
}

fn connect(tls: DaemonTls) -> Result<Connection, ConfigError> {
    Connection::new(tls, |http| http)
}

#[test]
fn a_ca_and_a_client_certificate_build_a_client() {
    let tls = DaemonTls {
        ca_file: Some(credential("ca.crt")),
        cert_file: Some(credential("client.crt")),
        key_file: Some(credential("client.key")),
    };
    assert!(connect(tls).is_ok());
    assert!(connect(DaemonTls::default()).is_ok());
}

#[test]
fn each_unusable_tls_file_is_named_with_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let not_pem = dir.path().join("ca.crt");
    std::fs::write(&not_pem, "hello").unwrap();
    let cases = [
        (
            DaemonTls {
                ca_file: Some(dir.path().join("absent.crt")),
                ..DaemonTls::default()
            },
            "absent.crt",
        ),
        (
            DaemonTls {
                ca_file: Some(not_pem.clone()),
                ..DaemonTls::default()
            },
            "no CERTIFICATE block",
        ),
        (
            DaemonTls {
                cert_file: Some(credential("client.crt")),
                ..DaemonTls::default()
            },
            "needs both cert_file and key_file",
        ),
        (
            DaemonTls {
                cert_file: Some(credential("client.crt")),
                key_file: Some(not_pem),
                ..DaemonTls::default()
            },
            "client.crt: with the key in",
        ),
    ];
    for (tls, expected) in cases {
        let error = connect(tls).err().expect("refused").to_string();
        assert!(error.contains(expected), "{error} lacks {expected:?}");
    }
}

#[test]
fn changed_files_rebuild_the_client_and_unusable_ones_keep_it() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.crt");
    std::fs::copy(credential("ca.crt"), &ca).unwrap();
    let connection = connect(DaemonTls {
        ca_file: Some(ca.clone()),
        ..DaemonTls::default()
    })
    .unwrap();
    let contents = |c: &Connection| c.current.lock().unwrap().contents.ca.clone();
    let first = contents(&connection);

    std::fs::write(&ca, "not a certificate").unwrap();
    connection.follow_files(&mut connection.current.lock().unwrap());
    assert_eq!(contents(&connection), first, "unusable: the client in use stays");
    assert!(
        connection.current.lock().unwrap().refused.is_some(),
        "and is not tried again until it changes"
    );

    let bundle = [
        std::fs::read(credential("ca.crt")).unwrap(),
        std::fs::read(credential("daemon.crt")).unwrap(),
    ]
    .concat();
    std::fs::write(&ca, &bundle).unwrap();
    connection.follow_files(&mut connection.current.lock().unwrap());
    assert_eq!(contents(&connection), Some(bundle), "changed: rebuilt");
}
