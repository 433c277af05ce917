//! A minimal QMP client: capabilities negotiation, then `execute` returning `return` or `error`.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

pub struct Qmp {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
}

impl Qmp {
    /// Connects to a QMP socket, retrying until it exists or `within` elapses.
    pub async fn connect(path: &Path, within: Duration) -> anyhow::Result<Self> {
        let deadline = tokio::time::Instant::now() + within;
        let stream = loop {
            match UnixStream::connect(path).await {
                Ok(s) => break s,
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    return Err(e).with_context(|| format!("connecting to QMP socket {}", path.display()));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        let (r, w) = stream.into_split();
        let mut qmp = Self {
            reader: BufReader::new(r),
            writer: w,
        };
        let greeting = qmp.read_message().await.context("reading QMP greeting")?;
        anyhow::ensure!(greeting.get("QMP").is_some(), "not a QMP greeting: {greeting}");
        qmp.execute("qmp_capabilities", Value::Null).await?;
        Ok(qmp)
    }

    async fn read_message(&mut self) -> anyhow::Result<Value> {
        let mut line = String::new();
        let n = self.reader.read_line(&mut line).await?;
        anyhow::ensure!(n > 0, "QMP connection closed");
        serde_json::from_str(&line).with_context(|| format!("bad QMP message: {line}"))
    }

    /// Runs one command; events arriving meanwhile are skipped.
    pub async fn execute(&mut self, command: &str, arguments: Value) -> anyhow::Result<Value> {
        let msg = if arguments.is_null() {
            json!({ "execute": command })
        } else {
            json!({ "execute": command, "arguments": arguments })
        };
        let mut text = serde_json::to_string(&msg)?;
        text.push('\n');
        self.writer.write_all(text.as_bytes()).await?;
        loop {
            let reply = self.read_message().await?;
            if let Some(ret) = reply.get("return") {
                return Ok(ret.clone());
            }
            if let Some(err) = reply.get("error") {
                anyhow::bail!("QMP {command} failed: {err}");
            }
        }
    }

    /// Host thread ids of the vCPUs, ordered by vCPU index.
    pub async fn vcpu_thread_ids(&mut self) -> anyhow::Result<Vec<i32>> {
        let cpus = self.execute("query-cpus-fast", Value::Null).await?;
        let mut ids: Vec<(i64, i32)> = cpus
            .as_array()
            .context("query-cpus-fast did not return a list")?
            .iter()
            .map(|c| {
                let idx = c["cpu-index"].as_i64().unwrap_or(0);
                let tid = c["thread-id"].as_i64().unwrap_or(0) as i32;
                (idx, tid)
            })
            .collect();
        ids.sort();
        Ok(ids.into_iter().map(|(_, t)| t).collect())
    }
}

/// A guest's own QMP connection, one command at a time for all its callers; empty before it
/// is connected and once it is closed.
#[derive(Default)]
pub struct QmpSlot(tokio::sync::Mutex<Option<Qmp>>);

impl QmpSlot {
    pub fn new(qmp: Qmp) -> Self {
        Self(tokio::sync::Mutex::new(Some(qmp)))
    }

    /// Connects the slot (the caller owns the guest, so nobody else holds the lock).
    pub fn set(&mut self, qmp: Qmp) {
        *self.0.get_mut() = Some(qmp);
    }

    /// Closes the slot, handing back the connection if there was one.
    pub async fn take(&self) -> Option<Qmp> {
        self.0.lock().await.take()
    }

    pub async fn execute(&self, command: &str, arguments: Value) -> anyhow::Result<Value> {
        let mut qmp = self.0.lock().await;
        qmp.as_mut()
            .context("QMP is closed")?
            .execute(command, arguments)
            .await
    }

    pub async fn vcpu_thread_ids(&self) -> anyhow::Result<Vec<i32>> {
        let mut qmp = self.0.lock().await;
        qmp.as_mut().context("QMP is closed")?.vcpu_thread_ids().await
    }
}
