//! The admin page (`admin-ui/` in the repository) as it is served at `/admin/` (its embedded files
//! are [`crate::http::page`]'s, which the OpenAPI document lists too).
//!
//! Owns the headers every one of its files carries:
//! a Content-Security-Policy that allows only this origin's own files (no inline script or
//! style, no framing), `nosniff`, and no caching, so a new build's page is the one loaded. The
//! page is served only where the admin API is (404 while it is off; on `admin.bind` when set);
//! it holds no secret, and everything it shows comes from the authenticated API.

use warp::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
};
use warp::http::{HeaderValue, StatusCode};
use warp::reply::Response;

use crate::app::AppState;
use crate::http::Route;
use crate::http::page::FILES;
use std::sync::Arc;
use warp::Filter;

/// The page's Content-Security-Policy. Images may come from any https origin: the Groups view
/// shows members' profile pictures (asked for without a referrer).
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: https:; \
     connect-src 'self'; form-action 'self'; base-uri 'none'; object-src 'none'; frame-ancestors 'none'";

/// The file at `name` (`""`: the page itself), with the page's headers; `None` for any other name.
pub fn file(name: &str) -> Option<Response> {
    let name = if name.is_empty() { "index.html" } else { name };
    let (_, content_type, bytes) = FILES.iter().find(|(file, ..)| *file == name)?;
    let mut response = Response::new(bytes.to_vec().into());
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Some(response)
}

/// This resource's routes, in the order they are tried.
pub(super) fn routes(app: &Arc<AppState>, _limit: u64) -> Vec<Route> {
    let enabled = app.config.admin.enabled();
    // GET /admin/ and /admin/{file}: the admin page; `/admin` itself redirects to `/admin/`, where
    // the page's relative links resolve. No credential is needed to load it (it holds none).
    let page = warp::path("admin").and(warp::path::tail()).and(warp::path::full()).and(warp::get()).and_then(
        move |tail: warp::path::Tail, full: warp::path::FullPath| async move {
            if !enabled {
                return Err(warp::reject::not_found());
            }
            if full.as_str() == "/admin" {
                let mut response = Response::new(Vec::<u8>::new().into());
                *response.status_mut() = StatusCode::PERMANENT_REDIRECT;
                response
                    .headers_mut()
                    .insert(warp::http::header::LOCATION, warp::http::HeaderValue::from_static("/admin/"));
                return Ok(response);
            }
            // The API's own paths are the routes above; no file of the page has a `/` in its name.
            file(tail.as_str()).ok_or_else(warp::reject::not_found)
        },
    );
    vec![page.boxed()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::page::{CSS, HTML, JS};

    #[test]
    fn every_file_of_the_page_is_embedded_and_nothing_else() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("admin-ui");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap())
            .filter(|entry| entry.file_type().unwrap().is_file())
            .map(|entry| entry.file_name().into_string().unwrap())
            .collect();
        on_disk.sort();
        let mut embedded: Vec<String> = FILES.iter().map(|(name, ..)| name.to_string()).collect();
        embedded.sort();
        assert_eq!(embedded, on_disk, "admin-ui/ (its top level; tests/ is not served) and FILES differ");
        for (name, content_type, bytes) in FILES {
            let want = match name.rsplit('.').next() {
                Some("html") => HTML,
                Some("css") => CSS,
                Some("js") => JS,
                other => panic!("no content type for {other:?}"),
            };
            assert_eq!(*content_type, want, "{name}");
            assert_eq!(std::fs::read(dir.join(name)).unwrap(), *bytes, "{name} is embedded as it is");
        }
    }

    #[test]
    fn the_page_loads_no_inline_script_or_style() {
        for (name, _, bytes) in FILES {
            let text = std::str::from_utf8(bytes).unwrap();
            assert!(!text.contains("<style"), "{name}");
            assert!(!text.contains(" style="), "{name}");
            assert!(!text.contains("onclick=\""), "{name}");
            if name.ends_with(".html") {
                assert_eq!(
                    text.matches("<script").count(),
                    text.matches("<script type=\"module\" src=").count(),
                    "{name}"
                );
            }
        }
        assert!(file("nope.js").is_none());
        assert!(file("../Cargo.toml").is_none());
    }
}
