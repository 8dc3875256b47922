//! The provider's HTTPS service: TLS (rustls) with the provider certificate
//! and any client certificate, HTTP/1.1 with bounds like the API's, and the
//! three documents — the version document, the WSDL, the SOAP endpoint.
//!
//! [`ProviderServer`] starts, stops and restarts the service without
//! touching anything else of the daemon: a restart ends every connection
//! and session (hosts call setContext again) while vVols, bindings, tasks
//! and the I/O to bound vVols go on.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use parking_lot::Mutex;
use tokio::sync::{watch, Semaphore};
use tokio_rustls::TlsAcceptor;

use crate::certs::{AnyClientCertificate, ProviderCertResolver};
use crate::provider::{Provider, RequestContext};
use crate::soap::{self, EnvelopeFault};
use crate::wsdl;

/// The session cookie.
pub const SESSION_COOKIE: &str = "VASASESSIONID";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    pub max_connections: usize,
    /// The TLS handshake and then each request head must arrive within this.
    pub header_timeout: Duration,
    pub max_body_bytes: usize,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_connections: 256,
            header_timeout: Duration::from_secs(10),
            max_body_bytes: 16 << 20,
        }
    }
}

/// How often a connection checks whether it must end (a stop, a new certificate).
const CHECK_INTERVAL: Duration = Duration::from_millis(250);
const ACCEPT_RETRY_DELAY: Duration = Duration::from_millis(50);

fn tls_config(provider: &Provider) -> Arc<rustls::ServerConfig> {
    let crypto = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(crypto.clone())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default versions")
        .with_client_cert_verifier(Arc::new(AnyClientCertificate::new(crypto)))
        .with_cert_resolver(Arc::new(ProviderCertResolver(provider.certs.clone())));
    Arc::new(config)
}

struct Documents {
    wsdl: Bytes,
    version: Bytes,
}

fn xml_response(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("Content-Type", "text/xml; charset=utf-8")
        .body(Full::new(body.into()))
        .expect("a valid response")
}

fn text_response(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("Content-Type", "text/plain; charset=utf-8")
        .body(Full::new(Bytes::from_static(text.as_bytes())))
        .expect("a valid response")
}

fn session_cookie(request: &Request<Incoming>) -> Option<String> {
    request
        .headers()
        .get_all(hyper::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value.trim_matches('"').to_string())
}

async fn handle(
    request: Request<Incoming>,
    provider: Arc<Provider>,
    documents: Arc<Documents>,
    client_chain: Arc<Vec<Vec<u8>>>,
    limits: ServerLimits,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = request.uri().path().to_string();
    let query = request.uri().query().unwrap_or("").to_string();
    let method = request.method().clone();
    let response = match (method, path.as_str()) {
        (Method::GET, wsdl::VERSION_PATH) => {
            xml_response(StatusCode::OK, documents.version.clone())
        }
        (Method::GET, wsdl::WSDL_PATH) => xml_response(StatusCode::OK, documents.wsdl.clone()),
        (Method::GET, wsdl::SERVICE_PATH) if query.eq_ignore_ascii_case("wsdl") => {
            xml_response(StatusCode::OK, documents.wsdl.clone())
        }
        (Method::POST, wsdl::SERVICE_PATH) => {
            soap_call(request, provider, client_chain, limits).await
        }
        (_, wsdl::VERSION_PATH | wsdl::WSDL_PATH | wsdl::SERVICE_PATH) => {
            text_response(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n")
        }
        _ => text_response(StatusCode::NOT_FOUND, "not found\n"),
    };
    Ok(response)
}

fn too_large(max_body_bytes: usize) -> Response<Full<Bytes>> {
    let message = format!("the request is larger than {max_body_bytes} bytes");
    xml_response(
        StatusCode::PAYLOAD_TOO_LARGE,
        soap::write_fault(&EnvelopeFault::Client(message)),
    )
}

async fn soap_call(
    request: Request<Incoming>,
    provider: Arc<Provider>,
    client_chain: Arc<Vec<Vec<u8>>>,
    limits: ServerLimits,
) -> Response<Full<Bytes>> {
    let soap_action = request
        .headers()
        .get("SOAPAction")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let session_cookie = session_cookie(&request);
    // A body declared too large is refused before any of it is read, so a
    // client waiting on "Expect: 100-continue" gets the 413 and sends nothing
    // (answering after reading the limit races the client still sending).
    let declared_bytes = request
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared_bytes.is_some_and(|bytes| bytes > limits.max_body_bytes as u64) {
        return too_large(limits.max_body_bytes);
    }
    let body = match Limited::new(request.into_body(), limits.max_body_bytes)
        .collect()
        .await
    {
        Ok(body) => body.to_bytes(),
        Err(error) => {
            if error
                .downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                return too_large(limits.max_body_bytes);
            }
            let message = format!("reading the request: {error}");
            return xml_response(
                StatusCode::BAD_REQUEST,
                soap::write_fault(&EnvelopeFault::Client(message)),
            );
        }
    };
    let context = RequestContext {
        soap_action,
        session_cookie,
        client_chain: client_chain.as_ref().clone(),
    };
    let answer = tokio::task::spawn_blocking(move || provider.handle(&body, &context)).await;
    let answer = match answer {
        Ok(answer) => answer,
        Err(error) => {
            tracing::error!("vasa: a call panicked: {error}");
            let fault = EnvelopeFault::Vasa(crate::fault::Fault::storage(
                "the call failed inside the provider",
            ));
            return xml_response(StatusCode::INTERNAL_SERVER_ERROR, soap::write_fault(&fault));
        }
    };
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = xml_response(status, answer.body);
    if let Some(id) = answer.set_session {
        let cookie = format!("{SESSION_COOKIE}={id}; Path=/; Secure; HttpOnly");
        response.headers_mut().insert(
            hyper::header::SET_COOKIE,
            cookie
                .parse()
                .expect("a session id is a valid header value"),
        );
    }
    response
}

/// Serves `listener` until `stop` turns true.
async fn serve(
    listener: tokio::net::TcpListener,
    provider: Arc<Provider>,
    limits: ServerLimits,
    mut stop: watch::Receiver<bool>,
) {
    let acceptor = TlsAcceptor::from(tls_config(&provider));
    let documents = Arc::new(Documents {
        wsdl: Bytes::from(wsdl::render_wsdl(&provider.config().service_url)),
        version: Bytes::from(wsdl::render_version_xml(&provider.config().service_url)),
    });
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            _ = stop.changed() => return,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(%error, "vasa: accept failed");
                    tokio::time::sleep(ACCEPT_RETRY_DELAY).await;
                    continue;
                }
            },
            _ = stop.changed() => return,
        };
        let _ = stream.set_nodelay(true);
        let (acceptor, provider, documents, stop) = (
            acceptor.clone(),
            provider.clone(),
            documents.clone(),
            stop.clone(),
        );
        tokio::spawn(async move {
            let _slot = slot;
            connection(stream, acceptor, provider, documents, limits, stop).await;
        });
    }
}

async fn connection(
    stream: tokio::net::TcpStream,
    acceptor: TlsAcceptor,
    provider: Arc<Provider>,
    documents: Arc<Documents>,
    limits: ServerLimits,
    stop: watch::Receiver<bool>,
) {
    let generation = provider.certs.generation();
    let tls = match tokio::time::timeout(limits.header_timeout, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(error)) => {
            tracing::debug!(%error, "vasa: TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!("vasa: TLS handshake timed out");
            return;
        }
    };
    let chain: Vec<Vec<u8>> = tls
        .get_ref()
        .1
        .peer_certificates()
        .map(|certs| certs.iter().map(|c| c.as_ref().to_vec()).collect())
        .unwrap_or_default();
    let chain = Arc::new(chain);
    let service_provider = provider.clone();
    let service = hyper::service::service_fn(move |request| {
        handle(
            request,
            service_provider.clone(),
            documents.clone(),
            chain.clone(),
            limits,
        )
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let conn = http.serve_connection(TokioIo::new(tls), service);
    tokio::pin!(conn);
    let mut check = tokio::time::interval(CHECK_INTERVAL);
    let mut ending = false;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(%error, "vasa: connection ended");
                }
                return;
            }
            _ = check.tick(), if !ending => {
                if *stop.borrow() || provider.certs.generation() != generation {
                    // The current request is answered, then the connection closes.
                    conn.as_mut().graceful_shutdown();
                    ending = true;
                }
            }
        }
    }
}

struct Running {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    local_addr: SocketAddr,
}

/// The provider's service, which can be stopped and started on its own.
pub struct ProviderServer {
    provider: Arc<Provider>,
    listen: SocketAddr,
    limits: ServerLimits,
    running: Mutex<Option<Running>>,
    /// When the service last started, seconds since the Unix epoch.
    started_unix_s: std::sync::atomic::AtomicU64,
}

impl ProviderServer {
    pub fn new(
        provider: Arc<Provider>,
        listen: SocketAddr,
        limits: ServerLimits,
    ) -> ProviderServer {
        ProviderServer {
            provider,
            listen,
            limits,
            running: Mutex::new(None),
            started_unix_s: std::sync::atomic::AtomicU64::new(0),
        }
    }

    pub fn provider(&self) -> &Arc<Provider> {
        &self.provider
    }

    /// Where it listens, while it runs.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.running.lock().as_ref().map(|r| r.local_addr)
    }

    pub fn started_unix_s(&self) -> u64 {
        self.started_unix_s
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Starts serving on an already bound listener.
    pub fn start_on(&self, listener: tokio::net::TcpListener) -> std::io::Result<SocketAddr> {
        let local_addr = listener.local_addr()?;
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(serve(listener, self.provider.clone(), self.limits, stopped));
        let previous = self.running.lock().replace(Running {
            stop,
            task,
            local_addr,
        });
        debug_assert!(previous.is_none(), "started twice");
        self.started_unix_s
            .store(crate::now_unix_s(), std::sync::atomic::Ordering::Relaxed);
        Ok(local_addr)
    }

    /// Stops: no new connections, the current ones close after their
    /// request, every session ends.
    pub async fn stop(&self) {
        let running = self.running.lock().take();
        if let Some(running) = running {
            let _ = running.stop.send(true);
            let _ = running.task.await;
        }
        self.provider.sessions.clear();
    }

    /// Stops and starts again on the same address.
    pub async fn restart(&self) -> std::io::Result<SocketAddr> {
        let addr = self.local_addr().unwrap_or(self.listen);
        self.stop().await;
        let listener = tokio::net::TcpListener::bind(addr).await?;
        self.start_on(listener)
    }
}
