//! docs/ARCHITECTURE.md's crate graph against Cargo's.

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::process::Command;

    type Graph = BTreeMap<String, Vec<String>>;

    /// The table between the `crate graph` markers: package → its workspace dependencies.
    fn stated(md: &str) -> Graph {
        let begin = md.find("<!-- crate graph: begin -->").expect("the begin marker");
        let end = md.find("<!-- crate graph: end -->").expect("the end marker");
        let names = |cell: &str| -> Vec<String> {
            let mut v: Vec<String> = cell
                .split(',')
                .map(|c| c.trim().trim_matches('`').to_owned())
                .filter(|c| !c.is_empty() && c != "—")
                .collect();
            v.sort();
            v
        };
        md[begin..end]
            .lines()
            .filter(|l| l.starts_with("| `"))
            .map(|l| {
                let cells: Vec<&str> = l.trim_matches('|').split('|').collect();
                assert_eq!(cells.len(), 2, "a row of two cells: {l}");
                (cells[0].trim().trim_matches('`').to_owned(), names(cells[1]))
            })
            .collect()
    }

    /// Cargo's: every workspace package and its normal dependencies among them.
    fn cargos() -> Graph {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        let o = Command::new(cargo)
            .current_dir(root)
            .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
            .output()
            .expect("cargo metadata");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let m: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let pkgs = m["packages"].as_array().unwrap();
        let members: Vec<&str> = pkgs.iter().map(|p| p["name"].as_str().unwrap()).collect();
        pkgs.iter()
            .map(|p| {
                let mut deps: Vec<String> = p["dependencies"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|d| d["kind"].is_null())
                    .filter_map(|d| d["name"].as_str())
                    .filter(|n| members.contains(n))
                    .map(str::to_owned)
                    .collect();
                deps.sort();
                deps.dedup();
                (p["name"].as_str().unwrap().to_owned(), deps)
            })
            .collect()
    }

    #[test]
    fn architecture_md_states_cargos_crate_graph() {
        let md = include_str!("../../docs/ARCHITECTURE.md");
        let (doc, cargo) = (stated(md), cargos());
        for (name, deps) in &cargo {
            assert_eq!(doc.get(name), Some(deps), "docs/ARCHITECTURE.md's row of {name}");
        }
        for name in doc.keys() {
            assert!(cargo.contains_key(name), "docs/ARCHITECTURE.md names no package {name}");
        }
    }
}
