//! `labctl schema`: the JSON schema of labs.yaml, for editors.

use std::process::ExitCode;

pub fn run() -> anyhow::Result<ExitCode> {
    println!("{}", serde_json::to_string_pretty(&lab_model::json_schema())?);
    Ok(ExitCode::SUCCESS)
}
