//! Restore-side data path: decompressed xbstream goes to the extractor (`mbstream -x` /
//! `xbstream -x`) and through our parser at the same time. The extractor's exit code alone
//! proves nothing (a stream cut at a chunk boundary extracts with exit 0); the parser does.

use tokio::io::AsyncWriteExt;
use tokio::process::ChildStdin;

use crate::profile::ToolProfile;
use crate::tool::Tool;
use crate::xbstream::{Parser, StreamSummary};
use crate::{Error, Result};

pub struct Extraction {
    parser: Parser,
    tool: Tool,
    stdin: Option<ChildStdin>,
    profile: ToolProfile,
}

impl Extraction {
    pub fn start(
        profile: &ToolProfile,
        dir: &std::path::Path,
        parallel: Option<u32>,
    ) -> Result<Extraction> {
        let mut tool = Tool::spawn(
            &profile.extractor,
            &profile.extract_args(dir, parallel),
            true,
            profile.package(),
        )?;
        let stdin = tool.stdin();
        Ok(Extraction {
            parser: Parser::new(),
            tool,
            stdin: Some(stdin),
            profile: profile.clone(),
        })
    }

    pub async fn write(&mut self, data: &[u8]) -> Result<()> {
        self.parser.feed(data)?;
        let stdin = self.stdin.as_mut().expect("not finished");
        if let Err(e) = stdin.write_all(data).await {
            // The extractor died (disk full, ...): its own message says why.
            self.stdin = None;
            let failure = failure(&mut self.tool, &self.profile).await;
            return Err(failure.unwrap_or_else(|| Error::io(&self.profile.extractor, e)));
        }
        Ok(())
    }

    /// The stream ended: it must parse to a clean end and the extractor must exit 0.
    pub async fn finish(self) -> Result<StreamSummary> {
        let Extraction {
            parser,
            mut tool,
            stdin,
            profile,
        } = self;
        let parsed = parser.finish();
        if let Err(e) = parsed {
            tool.kill().await;
            return Err(e.into());
        }
        drop(stdin);
        if let Some(err) = failure(&mut tool, &profile).await {
            return Err(err);
        }
        let summary = parsed?;
        let missing = crate::metadata::BackupMetadata::missing_final_files(&summary.metadata);
        if !missing.is_empty() {
            return Err(Error::Incomplete(format!(
                "the tool's final files {} are missing",
                missing.join(", ")
            )));
        }
        Ok(summary)
    }

    pub async fn abort(mut self) {
        self.tool.kill().await;
    }
}

/// The classified error when the tool exited non-zero.
async fn failure(tool: &mut Tool, profile: &ToolProfile) -> Option<Error> {
    let (status, tail) = tool.wait().await.ok()?;
    (!status.success()).then(|| profile.classify_failure(&tool.name, &status.to_string(), &tail))
}
