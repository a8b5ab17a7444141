//! `gpufleet config show`: the effective configuration and where each value came from.

use gpufleet::runtime::report::SettingRow;

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
            let doc: Vec<SettingRow> = rows
                .iter()
                .map(|(k, v, o)| SettingRow {
                    key: k.to_string(),
                    value: v.to_string(),
                    from: o.to_string(),
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
