//! `gpufleet config show`: the effective configuration and where each value came from.

use serde::Serialize;

use crate::output::{json, table, write_failed, OutputFormat};
use crate::shared::Failure;
use gpufleet::runtime::config::{Config, Flags};

/// Runs `gpufleet config show`.
pub fn config_show(flags: Flags, format: OutputFormat) -> Result<(), Failure> {
    let cfg = Config::load(&flags)?;
    let rows = cfg.rows();
    let mut out = std::io::stdout().lock();
    match format {
        OutputFormat::Json | OutputFormat::Csv => {
            #[derive(Serialize)]
            struct Setting<'a> {
                key: &'a str,
                value: &'a str,
                from: &'a str,
            }
            let doc: Vec<Setting<'_>> = rows
                .iter()
                .map(|(k, v, o)| Setting {
                    key: k,
                    value: v,
                    from: o,
                })
                .collect();
            if format == OutputFormat::Csv {
                crate::output::csv_rows(&mut out, &doc)?;
            } else {
                json(&mut out, &doc)?;
            }
        }
        OutputFormat::Table => {
            table(&mut out, &["KEY", "VALUE", "FROM"], rows, |(k, v, o)| {
                vec![k, v, o]
            })
            .map_err(write_failed)?;
        }
    }
    Ok(())
}
