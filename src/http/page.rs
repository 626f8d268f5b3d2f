//! The admin page's files (`admin-ui/` in the repository), embedded in the binary so that a build
//! never needs Node: what the admin routes serve and what the OpenAPI document lists, so the two
//! cannot disagree.

/// The content type of the page itself.
pub const HTML: &str = "text/html; charset=utf-8";
/// The content type of its style sheet.
pub const CSS: &str = "text/css; charset=utf-8";
/// The content type of its scripts.
pub const JS: &str = "text/javascript; charset=utf-8";

/// Every file of the page: its name under `/admin/`, its content type, its bytes.
pub const FILES: &[(&str, &str, &[u8])] = &[
    ("index.html", HTML, include_bytes!("../../admin-ui/index.html")),
    ("style.css", CSS, include_bytes!("../../admin-ui/style.css")),
    ("app.js", JS, include_bytes!("../../admin-ui/app.js")),
    ("api.js", JS, include_bytes!("../../admin-ui/api.js")),
    ("dom.js", JS, include_bytes!("../../admin-ui/dom.js")),
    ("chart.js", JS, include_bytes!("../../admin-ui/chart.js")),
    ("members.js", JS, include_bytes!("../../admin-ui/members.js")),
    ("groups.js", JS, include_bytes!("../../admin-ui/groups.js")),
    ("media.js", JS, include_bytes!("../../admin-ui/media.js")),
    ("reports.js", JS, include_bytes!("../../admin-ui/reports.js")),
    ("names.js", JS, include_bytes!("../../admin-ui/names.js")),
    ("sync.js", JS, include_bytes!("../../admin-ui/sync.js")),
];
