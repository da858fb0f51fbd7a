//! Runs one program with arguments and a hard timeout, capturing its output.
//!
//! Slurm's client commands block when slurmctld is slow or gone; the daemon must never hang
//! on them, so a command that overruns its timeout is killed and reported as such. Output is
//! drained on helper threads so that a chatty command cannot fill a pipe and deadlock.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Why a command did not give usable output.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The program could not be started.
    #[error("cannot run {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The slurm.conf the commands were told to use does not exist: Slurm's commands would
    /// look for a configless controller and wait until their timeout, so none is run.
    #[error(
        "slurm.conf {path} does not exist (named by {named_by}); Slurm's commands are not run without it"
    )]
    MissingConf {
        /// The path named.
        path: String,
        /// Where it was named: `[slurm] slurm_conf` or `SLURM_CONF`.
        named_by: &'static str,
    },
    /// The program ran longer than allowed and was killed.
    #[error("{command} did not finish within {timeout:?} and was killed")]
    Timeout {
        /// The command line, for the message.
        command: String,
        /// The limit.
        timeout: Duration,
    },
    /// The program exited with a failure status.
    #[error("{command} failed ({status}): {stderr}")]
    Failed {
        /// The command line, for the message.
        command: String,
        /// Its exit status.
        status: String,
        /// Its standard error (trimmed).
        stderr: String,
    },
}

/// The captured output of a successful command.
#[derive(Clone, Debug)]
pub struct Output {
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// The environment a command runs in.
#[derive(Clone, Copy, Debug)]
pub enum Environment<'a> {
    /// This process's environment with these variables added or replaced.
    Inherited(&'a [(String, String)]),
    /// Only these variables.
    Only(&'a [(String, String)]),
}

/// Runs `program args...` with extra environment `env`, failing after `timeout`.
pub fn run(
    program: &str,
    args: &[String],
    env: &[(String, String)],
    timeout: Duration,
) -> Result<Output, CommandError> {
    run_in(program, args, Environment::Inherited(env), timeout)
}

/// Runs `program args...` in environment `env`, failing after `timeout`.
pub fn run_in(
    program: &str,
    args: &[String],
    env: Environment<'_>,
    timeout: Duration,
) -> Result<Output, CommandError> {
    let shown = show(program, args);
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let vars = match env {
        Environment::Inherited(vars) => vars,
        Environment::Only(vars) => {
            cmd.env_clear();
            vars
        }
    };
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().map_err(|source| CommandError::Spawn {
        program: program.to_string(),
        source,
    })?;
    let out_pipe = child.stdout.take();
    let err_pipe = child.stderr.take();
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            // A full read of a large queue is 100 MB and more: the answer becomes the string
            // in place (no copy), and the slack of the buffer's doubling is given back.
            buf.shrink_to_fit();
            String::from_utf8(buf)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
        })
    };
    let out_thread = drain(out_pipe.map(|p| Box::new(p) as Box<dyn Read + Send>));
    let err_thread = drain(err_pipe.map(|p| Box::new(p) as Box<dyn Read + Send>));
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                let _ = out_thread.join();
                let _ = err_thread.join();
                return Err(CommandError::Timeout {
                    command: shown,
                    timeout,
                });
            }
        }
    };
    let stdout = out_thread.join().unwrap_or_default();
    let stderr = err_thread.join().unwrap_or_default();
    if !status.success() {
        return Err(CommandError::Failed {
            command: shown,
            status: status.to_string(),
            stderr: stderr.trim().to_string(),
        });
    }
    Ok(Output { stdout, stderr })
}

/// The command line as a user would read it in a log (arguments quoted only when needed).
fn show(program: &str, args: &[String]) -> String {
    let mut s = program.to_string();
    for a in args {
        s.push(' ');
        if a.is_empty() || a.contains(|c: char| c.is_whitespace() || c == '\'' || c == '"') {
            s.push_str(&format!("{a:?}"));
        } else {
            s.push_str(a);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn captures_output_and_passes_arguments_verbatim() {
        let out = run(
            "printf",
            &args(&["%s|", "a b", "$(rm -rf /)", ";x"]),
            &[],
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(out.stdout, "a b|$(rm -rf /)|;x|");
    }

    #[test]
    fn failures_carry_status_and_stderr() {
        let e = run(
            "sh",
            &args(&["-c", "echo bad >&2; exit 3"]),
            &[],
            Duration::from_secs(5),
        )
        .unwrap_err();
        match e {
            CommandError::Failed { stderr, status, .. } => {
                assert_eq!(stderr, "bad");
                assert!(status.contains('3'), "{status}");
            }
            other => panic!("{other}"),
        }
    }

    #[test]
    fn overrunning_commands_are_killed() {
        let e = run("sleep", &args(&["30"]), &[], Duration::from_millis(100)).unwrap_err();
        assert!(matches!(e, CommandError::Timeout { .. }), "{e}");
    }

    #[test]
    fn missing_programs_are_reported() {
        let e = run("/nonexistent/prog", &[], &[], Duration::from_secs(1)).unwrap_err();
        assert!(matches!(e, CommandError::Spawn { .. }), "{e}");
    }

    #[test]
    fn environment_is_passed() {
        let env = vec![("HADAR_T".to_string(), "v".to_string())];
        let out = run(
            "sh",
            &args(&["-c", "printf %s \"$HADAR_T\""]),
            &env,
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(out.stdout, "v");
    }
}
