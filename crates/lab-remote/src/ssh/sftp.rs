//! Files over SFTP: an upload that replaces the remote file only when it
//! is whole, and a download into memory.

use super::error::SshError;
use super::SshSession;
use crate::command::RemoteCommand;

impl SshSession {
    /// Writes `bytes` to `remote_path` over SFTP, through a temporary name and
    /// a rename so a running binary is never half-overwritten.
    pub async fn upload(&self, bytes: &[u8], remote_path: &str, mode: u32) -> Result<(), SshError> {
        use russh_sftp::client::SftpSession;
        use tokio::io::AsyncWriteExt;
        let sftp_err = |message: String| SshError::Sftp {
            node: self.node.clone(),
            path: remote_path.to_string(),
            message,
        };
        let channel = self.handle.channel_open_session().await.map_err(|e| self.protocol(e))?;
        channel
            .request_subsystem(true, "sftp")
            .await
            .map_err(|e| self.protocol(e))?;
        let sftp = SftpSession::new(channel.into_stream())
            .await
            .map_err(|e| sftp_err(e.to_string()))?;
        let tmp = format!("{remote_path}.upload");
        let mut file = sftp.create(&tmp).await.map_err(|e| sftp_err(e.to_string()))?;
        file.write_all(bytes).await.map_err(|e| sftp_err(e.to_string()))?;
        file.shutdown().await.map_err(|e| sftp_err(e.to_string()))?;
        drop(file);
        let _ = sftp.close().await;
        let install = RemoteCommand::new("chmod")
            .arg(format!("{mode:o}"))
            .arg(&tmp)
            .and(RemoteCommand::new("mv").arg("-f").arg(&tmp).arg(remote_path));
        self.run(&install).await?;
        Ok(())
    }

    /// Reads `remote_path` over SFTP (a capture, a log) into memory.
    pub async fn download(&self, remote_path: &str) -> Result<Vec<u8>, SshError> {
        use russh_sftp::client::SftpSession;
        use tokio::io::AsyncReadExt;
        let sftp_err = |message: String| SshError::Sftp {
            node: self.node.clone(),
            path: remote_path.to_string(),
            message,
        };
        let channel = self.handle.channel_open_session().await.map_err(|e| self.protocol(e))?;
        channel
            .request_subsystem(true, "sftp")
            .await
            .map_err(|e| self.protocol(e))?;
        let sftp = SftpSession::new(channel.into_stream())
            .await
            .map_err(|e| sftp_err(e.to_string()))?;
        let mut file = sftp.open(remote_path).await.map_err(|e| sftp_err(e.to_string()))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .await
            .map_err(|e| sftp_err(e.to_string()))?;
        drop(file);
        let _ = sftp.close().await;
        Ok(bytes)
    }
}
