use super::*;

#[test]
fn masks_passwords() {
    assert_eq!(
        mask_url("postgres://fleet:s3cr%40t@db.internal:5433/gf?sslmode=require"),
        "postgres://fleet:***@db.internal:5433/gf?sslmode=require"
    );
    assert_eq!(
        mask_url("postgresql://db/gf?user=a&password=hunter2"),
        "postgresql://db/gf?user=a&password=***"
    );
    assert_eq!(mask_url("postgres://a@db/gf"), "postgres://a@db/gf");
}

#[test]
fn parses_sslmodes_and_hides_the_password() {
    for (mode, verify) in [
        ("disable", Verify::None),
        ("require", Verify::None),
        ("verify-ca", Verify::Ca),
        ("verify-full", Verify::Full),
    ] {
        let p = parse_url(&format!("postgres://u:pw@h:6000/d?sslmode={mode}"))
            .unwrap_or_else(|e| panic!("{mode}: {e}"));
        assert_eq!(p.verify, verify);
        assert_eq!(shown(&p.config), "postgres://u@h:6000/d");
    }
    // A bad URL is named without its password.
    for (url, needle, password) in [
        (
            "postgres://u:pw@h/d?sslmode=sometimes",
            "unknown sslmode 'sometimes'",
            "pw",
        ),
        (
            "postgres://u:hunter2@h/d?bogus=1",
            "invalid PostgreSQL ledger URL",
            "hunter2",
        ),
    ] {
        let e = parse_url(url)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains(needle) && !e.contains(password), "{e}");
    }
}
