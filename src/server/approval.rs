//! Approvals over MCP: the questions of an execution's [`ApprovingHost`](crate::approval) become
//! elicitations of the client that called `execute_code`.
//!
//! Under 2025-11-25 the server asks with `elicitation/create` while the call is open. 2026-07-28
//! forbids server-to-client requests: `execute_code` answers `input_required` with the
//! elicitation and a `requestState` naming the paused execution (kept here, in memory, until
//! answered or the approval timeout passes); the client retries the call with the answer and the
//! execution carries on.

use crate::approval::{Answer, Question};
use rmcp::model::{
    CallToolResponse, CallToolResult, ClientCapabilities, ElicitRequest, ElicitRequestParams,
    ElicitResult, ElicitationAction, ElicitationSchema, InputRequest, InputRequests,
    InputRequiredResult, InputResponses, ProtocolVersion, RequestMetaObject,
};
use rmcp::{ErrorData as McpError, Peer, RoleServer};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

/// The key of our one input request in an `input_required` result.
const INPUT_KEY: &str = "approval";
/// The boolean field of the form: allow every remaining call to the tool in this run.
const ALLOW_ALL: &str = "allow_all";
/// How long a paused execution waits for the client's retry beyond the approval timeout.
const RETRY_GRACE: Duration = Duration::from_secs(10);

/// An execution in progress: its task (the whole execute_code pipeline) and its questions.
pub(super) struct Running {
    pub code: String,
    pub task: AbortOnDropHandle<Result<CallToolResult, McpError>>,
    pub questions: mpsc::UnboundedReceiver<Question>,
}

/// How this request's client is asked.
pub(super) enum Asking {
    /// 2025-11-25: `elicitation/create` on the open request.
    Directly(Peer<RoleServer>),
    /// 2026-07-28: `input_required`, and the client's retry.
    InputRequired,
}

/// What this request can do: whether its client can be asked at all, and how.
pub(super) fn asking(meta: &RequestMetaObject, peer: &Peer<RoleServer>) -> Option<Asking> {
    let info = peer.peer_info();
    let version = meta
        .protocol_version()
        .or_else(|| info.as_ref().map(|i| i.protocol_version.clone()));
    let capabilities: Option<ClientCapabilities> = meta
        .client_capabilities()
        .or_else(|| info.as_ref().map(|i| i.capabilities.clone()));
    let elicitation = capabilities.and_then(|c| c.elicitation)?;
    // Form mode, which is what an approval is (declared bare, it means form).
    if elicitation.form.is_none() && elicitation.url.is_some() {
        return None;
    }
    Some(
        if version.is_some_and(|v| v >= ProtocolVersion::V_2026_07_28) {
            Asking::InputRequired
        } else {
            Asking::Directly(peer.clone())
        },
    )
}

/// Executions paused on a question put as `input_required`, by their `requestState`.
#[derive(Clone, Default)]
pub(super) struct Paused(Arc<parking_lot::Mutex<HashMap<String, (Running, Question)>>>);

impl Paused {
    /// Takes the execution `state` names back, answers its question from `responses` and
    /// returns it to be driven on.
    pub fn resume(
        &self,
        state: &str,
        responses: Option<InputResponses>,
        code: &str,
    ) -> Result<Running, McpError> {
        let Some((running, question)) = self.0.lock().remove(state) else {
            return Err(McpError::invalid_params(
                "requestState names no paused execution here (it ended, its approval timed out, or another replica holds it)",
                None,
            ));
        };
        if running.code != code {
            // Put back: a mismatched retry must not cost the real one its execution.
            self.0.lock().insert(state.to_owned(), (running, question));
            return Err(McpError::invalid_params(
                "the retried execute_code has other code than the execution its requestState names",
                None,
            ));
        }
        let answer = responses
            .and_then(|mut r| r.remove(INPUT_KEY))
            .map(|v| match serde_json::from_value::<ElicitResult>(v) {
                Ok(result) => answer_of(&result),
                Err(e) => Answer::Failed(format!(
                    "the client's answer is not an elicitation result: {e}"
                )),
            })
            .unwrap_or_else(|| Answer::Failed("the client retried without an answer".into()));
        tracing::debug!(target: "approval", "{}.{}: answered by input_required retry", question.server, question.tool);
        let _ = question.answer.send(answer);
        Ok(running)
    }

    fn park(&self, running: Running, question: Question, expires: Duration) -> String {
        let state = format!("approval-{}", crate::replay::new_execution_id());
        self.0.lock().insert(state.clone(), (running, question));
        let (paused, key) = (self.clone(), state.clone());
        tokio::spawn(async move {
            tokio::time::sleep(expires + RETRY_GRACE).await;
            // Never retried: dropping it stops the script.
            if paused.0.lock().remove(&key).is_some() {
                tracing::info!(target: "approval", "a paused execution was never resumed; stopped");
            }
        });
        state
    }
}

/// Drives an execution to its result, asking the client each question on the way. `None` for
/// `asking`: the host had no asker, so no question comes.
pub(super) async fn drive(
    mut running: Running,
    asking: Option<Asking>,
    paused: &Paused,
    timeout: Duration,
    ct: &CancellationToken,
) -> Result<CallToolResponse, McpError> {
    let cancelled = || McpError::internal_error("execution cancelled by the client", None);
    loop {
        tokio::select! {
            done = &mut running.task => return finished(done),
            Some(question) = running.questions.recv() => match &asking {
                Some(Asking::Directly(peer)) => {
                    let ask = peer.create_elicitation_with_timeout(params(&question), Some(timeout));
                    tokio::select! {
                        answer = ask => {
                            let answer = match answer {
                                Ok(result) => answer_of(&result),
                                Err(e) => Answer::Failed(format!("the client could not ask its user: {e}")),
                            };
                            let _ = question.answer.send(answer);
                        }
                        done = &mut running.task => return finished(done),
                        _ = ct.cancelled() => return Err(cancelled()),
                    }
                }
                Some(Asking::InputRequired) => {
                    let request = InputRequest::Elicitation(ElicitRequest::new(params(&question)));
                    let requests: InputRequests = [(INPUT_KEY.to_owned(), request)].into();
                    let state = paused.park(running, question, timeout);
                    return Ok(InputRequiredResult::new(Some(requests), Some(state)).into());
                }
                None => {
                    let _ = question.answer.send(Answer::Failed("the client cannot be asked".into()));
                }
            },
            _ = ct.cancelled() => return Err(cancelled()),
        }
    }
}

fn finished(
    done: Result<Result<CallToolResult, McpError>, tokio::task::JoinError>,
) -> Result<CallToolResponse, McpError> {
    match done {
        Ok(result) => result.map(Into::into),
        Err(e) => Err(McpError::internal_error(
            format!("the execution failed inside mcp-code-mode: {e}"),
            None,
        )),
    }
}

/// The elicitation for one question: its text, and one checkbox to allow the rest of the run.
fn params(question: &Question) -> ElicitRequestParams {
    let schema = ElicitationSchema::builder()
        .bool_property(ALLOW_ALL, |b| {
            b.title(question.allow_all_label.clone())
                .description("Accept allows this call; tick this to allow the later calls to this tool in this run without asking.")
                .with_default(false)
        })
        .build()
        .expect("a one-boolean form is a valid elicitation schema");
    ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: question.message.clone(),
        requested_schema: schema,
    }
}

fn answer_of(result: &ElicitResult) -> Answer {
    match result.action {
        ElicitationAction::Accept => {
            let all = result
                .content
                .as_ref()
                .and_then(|c| c.get(ALLOW_ALL))
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false);
            if all {
                Answer::AllInRun
            } else {
                Answer::Once
            }
        }
        ElicitationAction::Decline => Answer::Declined,
        // Cancel, and whatever a later revision adds: nothing that says "run it".
        _ => Answer::Cancelled,
    }
}
