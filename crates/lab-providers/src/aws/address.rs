//! The controller's own public address, which the security group lets reach
//! TCP 22 when labs.yaml names no `ssh_cidr`: asked of AWS's checkip service
//! over HTTPS only.

use std::time::Duration;

use super::error::AwsError;

/// Where the controller learns its public IPv4 address (AWS's own service).
const CHECKIP_URL: &str = "https://checkip.amazonaws.com/";

/// This controller's public IPv4 address as a /32, from [`CHECKIP_URL`]
/// over HTTPS (the system's trust roots), within 10 s.
pub(super) async fn controller_cidr() -> Result<String, AwsError> {
    let err = |detail: String| AwsError::ControllerAddress { detail };
    let answer = tokio::time::timeout(Duration::from_secs(10), https_get(CHECKIP_URL))
        .await
        .map_err(|_| err(format!("{CHECKIP_URL} did not answer within 10 s")))?
        .map_err(|e| err(format!("{CHECKIP_URL}: {e}")))?;
    parse_checkip(&answer).ok_or_else(|| err(format!("{CHECKIP_URL} answered {:?}", answer.trim())))
}

/// The body of a GET of `url`, HTTPS only, as text; an error says every
/// cause (hyper's own message is only "client error (Connect)").
async fn https_get(url: &str) -> Result<String, String> {
    https_get_inner(url).await.map_err(|e| {
        let mut text = e.to_string();
        let mut source = e.source();
        while let Some(cause) = source {
            text.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        text
    })
}

async fn https_get_inner(url: &str) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    use http_body_util::BodyExt;
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(rustls::crypto::ring::default_provider())?
        .https_only()
        .enable_http1()
        .build();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, http_body_util::Empty<bytes::Bytes>>(connector);
    let response = client.get(url.parse()?).await?;
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    if !status.is_success() {
        return Err(format!("HTTP {status}").into());
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// checkip's answer (an address and a newline) as a /32.
fn parse_checkip(answer: &str) -> Option<String> {
    answer
        .trim()
        .parse::<std::net::Ipv4Addr>()
        .ok()
        .map(|ip| format!("{ip}/32"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkip_answer_becomes_a_slash_32() {
        assert_eq!(parse_checkip("203.0.113.7\n").as_deref(), Some("203.0.113.7/32"));
        assert_eq!(parse_checkip("<html>blocked</html>"), None);
        assert_eq!(parse_checkip(""), None);
    }

    #[tokio::test]
    async fn the_address_lookup_refuses_plain_http() {
        // A listener that would answer if the client spoke plain HTTP to it.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let e = https_get(&url).await.unwrap_err();
        assert!(e.contains("unsupported scheme http"), "{e}");
    }
}
