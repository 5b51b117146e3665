//! Remote commands on a session's channels: streamed output, piped input
//! and output under flow control, and collected output with the exit
//! status (a signal's death as a shell reports it).

use russh::ChannelMsg;

use super::error::SshError;
use super::{CommandOutput, SshSession};
use crate::command::RemoteCommand;

/// How much of a command's input is read and handed to the channel at once.
const FEED_CHUNK: usize = 256 * 1024;

impl SshSession {
    /// Runs `command`, handing output chunks to `on_output(is_stderr, bytes)`
    /// as they arrive, and returns the exit status.
    pub async fn exec_streaming(
        &self,
        command: &RemoteCommand,
        stdin: Option<&[u8]>,
        mut on_output: impl FnMut(bool, &[u8]),
    ) -> Result<i32, SshError> {
        let mut channel = self.handle.channel_open_session().await.map_err(|e| self.protocol(e))?;
        channel
            .exec(true, command.as_str())
            .await
            .map_err(|e| self.protocol(e))?;
        if let Some(input) = stdin {
            channel.data(input).await.map_err(|e| self.protocol(e))?;
        }
        channel.eof().await.map_err(|e| self.protocol(e))?;
        let mut status = -1;
        while let Some(msg) = channel.wait().await {
            match msg {
                ChannelMsg::Data { data } => on_output(false, &data),
                ChannelMsg::ExtendedData { data, .. } => on_output(true, &data),
                ChannelMsg::ExitStatus { exit_status } => status = exit_status as i32,
                // As shells report it: 128 + the signal's number.
                ChannelMsg::ExitSignal { signal_name, .. } => status = 128 + signal_number(&signal_name),
                _ => {}
            }
        }
        Ok(status)
    }

    /// Runs `command` with `stdin` streamed to it and its stdout streamed
    /// into `stdout`, both under the channel's flow control (no whole file in
    /// memory, no round trip per chunk, as scp does it). Returns the exit
    /// status and the command's stderr.
    pub async fn exec_piped<R, W>(
        &self,
        command: &RemoteCommand,
        stdin: Option<R>,
        stdout: &mut W,
    ) -> Result<(i32, Vec<u8>), SshError>
    where
        R: tokio::io::AsyncRead + Unpin,
        W: tokio::io::AsyncWrite + Unpin,
    {
        use tokio::io::AsyncWriteExt;
        let channel = self.handle.channel_open_session().await.map_err(|e| self.protocol(e))?;
        channel
            .exec(true, command.as_str())
            .await
            .map_err(|e| self.protocol(e))?;
        let (mut reader, writer) = channel.split();
        let feed = async {
            use tokio::io::AsyncReadExt;
            if let Some(mut input) = stdin {
                let _coalesce = self.nagle.begin();
                // Large reads handed over whole: russh cuts them into
                // packets of the peer's maximum size. (`Channel::data`
                // copies through an 8 KiB buffer, one small packet per
                // read, which costs a slow node a third of the throughput.)
                loop {
                    let mut chunk = bytes::BytesMut::with_capacity(FEED_CHUNK);
                    if input.read_buf(&mut chunk).await? == 0 {
                        break;
                    }
                    writer.data_bytes(chunk.freeze()).await?;
                }
            }
            writer.eof().await
        };
        let drain = async {
            let mut status = -1;
            let mut stderr = Vec::new();
            while let Some(msg) = reader.wait().await {
                match msg {
                    ChannelMsg::Data { data } => stdout.write_all(&data).await?,
                    ChannelMsg::ExtendedData { data, .. } => stderr.extend_from_slice(&data),
                    ChannelMsg::ExitStatus { exit_status } => status = exit_status as i32,
                    ChannelMsg::ExitSignal { signal_name, .. } => status = 128 + signal_number(&signal_name),
                    _ => {}
                }
            }
            stdout.flush().await?;
            Ok::<_, std::io::Error>((status, stderr))
        };
        // A command that exits without reading all of its input (a full
        // disk, a missing directory) closes the channel while the writer
        // waits for window space that never comes: the command's end ends
        // the feeding, and its status and stderr say why.
        tokio::pin!(feed, drain);
        let mut fed = None;
        let drained = loop {
            tokio::select! {
                result = &mut feed, if fed.is_none() => fed = Some(result),
                result = &mut drain => break result,
            }
        };
        let (status, stderr) = drained.map_err(|e| SshError::Local {
            node: self.node.clone(),
            source: e,
        })?;
        if status == 0 {
            if let Some(Err(e)) = fed {
                return Err(self.protocol(e));
            }
        }
        Ok((status, stderr))
    }

    /// Runs `command` and collects its output, whatever its exit status.
    pub async fn exec(&self, command: &RemoteCommand) -> Result<CommandOutput, SshError> {
        let mut out = CommandOutput::default();
        out.status = self
            .exec_streaming(command, None, |is_err, data| {
                if is_err {
                    out.stderr.extend_from_slice(data)
                } else {
                    out.stdout.extend_from_slice(data)
                }
            })
            .await?;
        Ok(out)
    }

    /// Runs `command`; a non-zero exit is an error carrying status and stderr.
    pub async fn run(&self, command: &RemoteCommand) -> Result<CommandOutput, SshError> {
        let out = self.exec(command).await?;
        if out.status != 0 {
            return Err(SshError::CommandFailed {
                node: self.node.clone(),
                command: command.to_string(),
                status: out.status,
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
        Ok(out)
    }

    /// Runs `command` with `stdin` on its standard input (a script, a
    /// key: what must not appear in a command line); a non-zero exit is an
    /// error carrying the status and stderr, naming the command as `what`
    /// (the command line itself may be a whole script). Returns its stdout,
    /// trimmed.
    pub async fn run_with_input(&self, command: &RemoteCommand, stdin: &[u8], what: &str) -> Result<String, SshError> {
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        let status = self
            .exec_streaming(command, Some(stdin), |is_err, data| {
                if is_err {
                    stderr.extend_from_slice(data)
                } else {
                    stdout.extend_from_slice(data)
                }
            })
            .await?;
        if status != 0 {
            return Err(SshError::CommandFailed {
                node: self.node.clone(),
                command: what.to_string(),
                status,
                stderr: String::from_utf8_lossy(&stderr).into_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&stdout).trim().to_string())
    }
}

/// The number of the signal a command died of.
fn signal_number(signal: &russh::Sig) -> i32 {
    use russh::Sig;
    match signal {
        Sig::HUP => 1,
        Sig::INT => 2,
        Sig::QUIT => 3,
        Sig::ILL => 4,
        Sig::ABRT => 6,
        Sig::FPE => 8,
        Sig::KILL => 9,
        Sig::USR1 => 10,
        Sig::SEGV => 11,
        Sig::PIPE => 13,
        Sig::ALRM => 14,
        Sig::TERM => 15,
        _ => 127,
    }
}
