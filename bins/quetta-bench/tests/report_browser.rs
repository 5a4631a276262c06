//! The HTML report of real runs, opened in a real browser (headless Chromium, Debian's
//! `chromium`, installed by .ci/run): no script error, every chart drew all its points, a
//! hovered point shows its values and a clicked legend entry hides its series, then shows
//! it again. Without a Chromium the test fails under `CI`; elsewhere it says so and checks
//! nothing else.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::bin;

fn chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("QUETTA_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    ["chromium", "chromium-browser", "google-chrome"].iter().find_map(|name| {
        let ok = Command::new(name).arg("--version").output().is_ok_and(|o| o.status.success());
        ok.then(|| PathBuf::from(name))
    })
}

/// The DOM after the page's scripts ran.
fn dom(browser: &Path, html: &Path) -> String {
    let profile = html.with_extension("chromium-profile");
    let o = Command::new(browser)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", html.canonicalize().unwrap().display()))
        .output()
        .expect("run chromium");
    let _ = std::fs::remove_dir_all(&profile);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

/// The value of `attr="..."` in a tag's text.
fn attr<'a>(tag: &'a str, attr: &str) -> Option<&'a str> {
    let k = format!("{attr}=\"");
    let i = tag.find(&k)? + k.len();
    tag[i..].split('"').next()
}

/// What the page's own handlers did with events a driver script sent (appended to a copy of
/// the report, after the report's script): the first chart's first point hovered, its first
/// legend entry clicked twice.
const DRIVER: &str = r#"<script>
(function () {
  var b = document.body.dataset, svg = document.querySelector('svg');
  var c = svg.querySelector('g.series circle');
  b.expected = c.querySelector('title').textContent;
  c.dispatchEvent(new MouseEvent('mouseover', { bubbles: true }));
  var ro = svg.querySelector('text.readout');
  b.hovered = ro ? ro.textContent : '(no readout)';
  b.hoveredRadius = c.getAttribute('r');
  c.dispatchEvent(new MouseEvent('mouseout', { bubbles: true }));
  b.leftReadout = ro ? ro.textContent : '(no readout)';
  var l = svg.querySelector('g.legend');
  var g = svg.querySelector('g.series[data-series="' + l.dataset.series + '"]');
  b.before = getComputedStyle(g).display;
  l.dispatchEvent(new MouseEvent('click', { bubbles: true }));
  b.afterOne = getComputedStyle(g).display;
  l.dispatchEvent(new MouseEvent('click', { bubbles: true }));
  b.afterTwo = getComputedStyle(g).display;
})();
</script>"#;

/// Hover a point and toggle a legend entry of the report's first chart, in the browser.
fn interact(browser: &Path, html: &Path) {
    let page = std::fs::read_to_string(html).unwrap();
    let driven = html.with_extension("driven.html");
    std::fs::write(&driven, page.replace("</body>", &format!("{DRIVER}</body>"))).unwrap();
    let d = dom(browser, &driven);
    let body = &d[d.find("<body").expect("a body")..];
    let tag = &body[..body.find('>').unwrap()];
    assert_eq!(attr(tag, "data-error"), None, "no script error");
    let expected = attr(tag, "data-expected").expect("the driver ran");
    assert!(expected.contains(" = "), "a point's title names its values: {expected}");
    assert_eq!(attr(tag, "data-hovered"), Some(expected), "the hovered point's values shown");
    assert_eq!(attr(tag, "data-hovered-radius"), Some("5"), "the hovered point enlarged");
    assert_eq!(attr(tag, "data-left-readout"), Some(""), "the readout cleared on leaving it");
    assert_eq!(attr(tag, "data-before"), Some("inline"), "the series is shown at first");
    assert_eq!(attr(tag, "data-after-one"), Some("none"), "one click hides the series");
    assert_eq!(attr(tag, "data-after-two"), Some("inline"), "a second click shows it again");
}

fn check(browser: &Path, html: &Path, min_charts: usize) {
    let d = dom(browser, html);
    let body = &d[d.find("<body").expect("a body")..];
    let body_tag = &body[..body.find('>').unwrap()];
    assert_eq!(attr(body_tag, "data-ready"), Some("1"), "the script ran to its end");
    assert_eq!(attr(body_tag, "data-error"), None, "no script error");
    let charts: Vec<&str> = d.split("<svg").skip(1).collect();
    assert!(charts.len() >= min_charts, "{} charts", charts.len());
    for c in charts {
        let svg = &c[..c.find("</svg>").unwrap()];
        let tag = &svg[..svg.find('>').unwrap()];
        let title = attr(tag, "aria-label").unwrap_or("?");
        let planned: usize = svg
            .split("data-points=\"")
            .skip(1)
            .map(|s| s.split('"').next().unwrap().parse::<usize>().unwrap())
            .sum();
        let rendered: usize =
            attr(tag, "data-rendered").expect("counted by the script").parse().unwrap();
        assert!(planned > 0, "{title}: a chart without data was drawn");
        assert_eq!(rendered, planned, "{title}: the browser parsed every point");
        assert!(svg.contains("<title>"), "{title}: points can be hovered");
    }
}

#[test]
fn the_html_reports_render_in_a_real_browser() {
    let Some(browser) = chromium() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "no chromium on this machine, which CI needs (.ci/run installs Debian's chromium)"
        );
        eprintln!("SKIPPED: no chromium on this machine (.ci/run installs Debian's chromium)");
        return;
    };
    let root = std::env::temp_dir().join(format!("quetta-browser-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let (run, sweep, failed) = (root.join("run"), root.join("sweep"), root.join("failed"));
    let go = |args: &[&str]| {
        let o = bin().args(args).arg("-q").output().unwrap();
        assert!(
            o.status.code().is_some_and(|c| c <= 1),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    go(&["run", "--duration", "5", "--concurrency", "8", "--output-dir", run.to_str().unwrap()]);
    go(&[
        "sweep",
        "--concurrencies",
        "4,16",
        "--num-requests",
        "32",
        "--output-dir",
        sweep.to_str().unwrap(),
    ]);
    go(&[
        "run",
        "--num-requests",
        "5",
        "--sim-fault",
        "http500",
        "--output-dir",
        failed.to_str().unwrap(),
    ]);
    let repeats = root.join("repeats");
    let r = repeats.to_str().unwrap();
    go(&["run", "--num-runs", "3", "--num-requests", "24", "--output-dir", r]);
    for d in [&run, &sweep, &failed, &repeats] {
        let o = bin().arg("report").arg(d).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    // a 5 s run: three CDFs and four over-time charts
    check(&browser, &run.join("report.html"), 7);
    // a sweep: its nine charts, and each step's
    check(&browser, &sweep.join("report.html"), 9);
    // repeats: four charts of a figure by repeat with its mean and interval (the error
    // bars), then each repeat's own charts
    check(&browser, &repeats.join("report.html"), 4);
    let d = dom(&browser, &repeats.join("report.html"));
    assert!(d.contains("Across the repeats") && d.contains("95% CI of the mean"));
    assert!(d.contains("Throughput by repeat") && d.contains("Repeat 3"));
    // the handlers: hover a point, toggle a legend entry
    interact(&browser, &run.join("report.html"));
    interact(&browser, &sweep.join("report.html"));
    // nothing succeeded: no chart at all, the errors first
    let d = dom(&browser, &failed.join("report.html"));
    assert!(!d.contains("<svg") && d.contains("FAILED: every one of the 5"));
    let _ = std::fs::remove_dir_all(&root);
}
