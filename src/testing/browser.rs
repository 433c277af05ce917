//! A real headless Chromium (Debian's, from scripts/setup) loading a report page.

/// Loads `page` in headless Chromium and returns what its checking script left in
/// `<pre id="ocrig-check">` (JSON), failing the test if the script did not run.
pub(crate) fn checked_in_chromium(page: &std::path::Path, tmp: &std::path::Path) -> serde_json::Value {
    let out = std::process::Command::new("/usr/bin/chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"])
        .args([
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .args(["--window-size=1300,900", "--virtual-time-budget=5000"])
        .arg(format!("--user-data-dir={}", tmp.join("profile").display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("Debian's chromium (scripts/setup installs it)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dom = String::from_utf8_lossy(&out.stdout);
    let json = dom
        .split("<pre id=\"ocrig-check\">")
        .nth(1)
        .and_then(|s| s.split("</pre>").next())
        .expect("the checking script ran");
    serde_json::from_str(&json.replace("&quot;", "\"").replace("&amp;", "&")).unwrap()
}
