//! The command examples of the README and docs/: what the CLI's tests parse
//! and run, so that the docs cannot drift from the commands.

/// The `gpufleet …` command lines of the `sh` and `console` code blocks
/// of the README and docs/ (a line continued with `\` joined; comments,
/// pipes and redirections cut off; environment assignments in front
/// dropped), with the file each is in.
pub fn examples(root: &std::path::Path) -> Vec<(String, String)> {
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<_> = std::fs::read_dir(root.join("docs"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    docs.retain(|p: &std::path::PathBuf| p.extension().is_some_and(|e| e == "md"));
    docs.sort();
    files.extend(docs);
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        let mut lang: Option<&str> = None;
        let mut pending = String::new();
        for line in text.lines() {
            if let Some(fence) = line.strip_prefix("```") {
                lang = match lang {
                    Some(_) => None,
                    None => Some(fence.trim()),
                };
                continue;
            }
            // In a console block only `$ ` lines are commands (the
            // others are what they print).
            let l = match lang {
                Some("sh") => line.trim(),
                Some("console") if !pending.is_empty() => line.trim(),
                Some("console") => match line.trim().strip_prefix("$ ") {
                    Some(c) => c,
                    None => continue,
                },
                _ => continue,
            };
            let joined = format!("{pending}{l}");
            if let Some(head) = joined.strip_suffix('\\') {
                pending = head.to_string();
                continue;
            }
            pending.clear();
            let mut words: Vec<&str> = joined.split_whitespace().collect();
            while words
                .first()
                .is_some_and(|w| w.contains('=') && !w.starts_with('-'))
            {
                words.remove(0);
            }
            if words.first() != Some(&"gpufleet") {
                continue;
            }
            let cmd = words.join(" ");
            let cmd = command_part(cmd.split(" # ").next().unwrap_or(""));
            out.push((
                f.file_name()
                    .map(|n| n.to_string_lossy().to_string())
                    .unwrap_or_default(),
                cmd.trim().to_string(),
            ));
        }
    }
    out
}

/// The command of an example line: what stands before a comment column
/// (two spaces and more), a pipe, a redirection or a following `&&`.
pub fn command_part(line: &str) -> &str {
    let mut cmd = line.split("  ").next().unwrap_or("");
    for cut in [" | ", " > ", " && "] {
        cmd = cmd.split(cut).next().unwrap_or("");
    }
    cmd.trim()
}

/// Shell words, with single and double quotes (enough for the examples).
pub fn words(line: &str) -> Vec<String> {
    let (mut out, mut cur, mut quote, mut any) = (Vec::new(), String::new(), None, false);
    for c in line.chars() {
        match (quote, c) {
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            (Some(q), c) if c == q => quote = None,
            (None, ' ') => {
                if any {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            (_, c) => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(cur);
    }
    out
}
