//! The secret stores a node reads at boot, on wiremock, bodies shaped as
//! the REST references show: GCP Secret Manager's
//! `projects.secrets.versions.access` and Azure Key Vault's Get Secret.
//! Each answers the value only to the bearer token it was given, and
//! otherwise as the service refuses (403 `PERMISSION_DENIED`, 401
//! `Unauthorized`). (AWS Secrets Manager and SSM are moto's.)

use base64::Engine;
use serde_json::json;
use wiremock::matchers::{header, method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// Serves `value` as version `version` (and `latest`) of secret `secret`
/// in project `project`, to `token` alone.
pub async fn secret_manager(
    server: &MockServer,
    project: &str,
    secret: &str,
    version: u32,
    value: &[u8],
    token: &str,
) {
    let data = base64::engine::general_purpose::STANDARD.encode(value);
    for v in [version.to_string(), "latest".to_string()] {
        let at = format!("/v1/projects/{project}/secrets/{secret}/versions/{v}:access");
        Mock::given(method("GET"))
            .and(path(at.as_str()))
            .and(header("authorization", format!("Bearer {token}").as_str()))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({
                "name": format!("projects/{project}/secrets/{secret}/versions/{version}"),
                "payload": { "data": data, "dataCrc32c": "2777338164" }
            })))
            .with_priority(1)
            .mount(server)
            .await;
        Mock::given(method("GET"))
            .and(path(at.as_str()))
            .respond_with(ResponseTemplate::new(403).set_body_json(json!({
                "error": {
                    "code": 403,
                    "message": format!("Permission 'secretmanager.versions.access' denied for resource 'projects/{project}/secrets/{secret}/versions/{v}' (or it may not exist)."),
                    "status": "PERMISSION_DENIED"
                }
            })))
            .with_priority(5)
            .mount(server)
            .await;
    }
}

/// Serves `value` as the latest version of Key Vault secret `name` (on the
/// vault whose URL is the server's), to `token` alone.
pub async fn key_vault(server: &MockServer, name: &str, value: &str, token: &str) {
    let at = format!("/secrets/{name}");
    Mock::given(method("GET"))
        .and(path(at.as_str()))
        .and(query_param("api-version", "7.4"))
        .and(header("authorization", format!("Bearer {token}").as_str()))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "value": value,
            "id": format!("{}/secrets/{name}/4387e9f3d6e14c459867679a90fd0f79", server.uri()),
            "attributes": {
                "enabled": true,
                "created": 1493938410,
                "updated": 1493938410,
                "recoveryLevel": "Recoverable+Purgeable"
            },
            "tags": { "value": "a tag, not the secret" }
        })))
        .with_priority(1)
        .mount(server)
        .await;
    Mock::given(method("GET"))
        .and(path(at.as_str()))
        .respond_with(ResponseTemplate::new(401).set_body_json(json!({
            "error": {
                "code": "Unauthorized",
                "message": "AKV10000: Request is missing a Bearer or PoP token."
            }
        })))
        .with_priority(5)
        .mount(server)
        .await;
}
