//! SDK worker behaviour against a scripted fake of the worker protocol:
//! task fields reach the handler, results are retried until answered,
//! `accepted: false` is final, `UNKNOWN_SESSION` re-registers and re-attaches
//! held tokens, the cancel list stops handlers, `max_tasks` bounds
//! concurrency, and shutdown unregisters. Most tests use the separate
//! result call (`results_on_poll(false)`); those at the end the default,
//! results riding on polls.

#![allow(clippy::unwrap_used)]

mod sdk_support;

use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use orbit_sdk::{Backoff, Error, Task, TaskError, Worker, WorkerBuilder};
use sdk_support::{dead_port, Fake, Reply, Req};
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot, Notify};

const FAST: Backoff = Backoff {
    initial: Duration::from_millis(5),
    factor: 2.0,
    max: Duration::from_millis(40),
};

/// The fake server's worker-protocol state.
#[derive(Default)]
struct Proto {
    registrations: AtomicUsize,
    tasks: Mutex<VecDeque<Value>>,
    unknown: Mutex<BTreeSet<String>>,
    results: Mutex<VecDeque<Reply>>,
    cancel: Mutex<Vec<String>>,
    register_reply: Mutex<Option<Reply>>,
    /// How long a poll that gets no task waits (default 20 ms).
    park_ms: AtomicU64,
    /// Refuse polls that carry results (`400`, as a server before them).
    refuse_results: AtomicBool,
}

impl Proto {
    fn answer(&self, req: &Req) -> Reply {
        let path = req.path.as_str();
        if req.method == "POST" && path == "/v1/workers" {
            if let Some(r) = self.register_reply.lock().unwrap().clone() {
                return r;
            }
            let n = self.registrations.fetch_add(1, Ordering::SeqCst) + 1;
            return Reply::ok(json!({"session_id": format!("s{n}"), "session_timeout_ms": 3000}));
        }
        if let Some(rest) = path.strip_prefix("/v1/workers/") {
            let session = rest.split('/').next().unwrap_or("");
            if self.unknown.lock().unwrap().remove(session) {
                return Reply::error(404, "UNKNOWN_SESSION");
            }
            if rest.ends_with("/poll") {
                let carried = req.body["results"].as_array().cloned().unwrap_or_default();
                if !carried.is_empty() && self.refuse_results.load(Ordering::SeqCst) {
                    return Reply::error(400, "INVALID_REQUEST");
                }
                let answers: Vec<Value> = carried
                    .iter()
                    .map(|r| {
                        let reply = self.result_reply();
                        let token = r["token"].clone();
                        if reply.status == 200 {
                            let mut a = reply.body.clone();
                            a["token"] = token;
                            a["status"] = json!(200);
                            a
                        } else {
                            json!({"token": token, "status": reply.status, "error": reply.body["error"]})
                        }
                    })
                    .collect();
                let max = req.body["max_tasks"].as_u64().unwrap_or(1) as usize;
                let mut queue = self.tasks.lock().unwrap();
                let n = max.min(queue.len());
                let tasks: Vec<Value> = queue.drain(..n).collect();
                let mut body = json!({ "tasks": tasks });
                if !answers.is_empty() {
                    body["results"] = json!(answers);
                }
                let reply = Reply::ok(body);
                let wait = req.body["wait_ms"].as_u64().unwrap_or(0);
                return if n == 0 && answers.is_empty() && wait > 0 {
                    let park = match self.park_ms.load(Ordering::SeqCst) {
                        0 => 20,
                        ms => ms,
                    };
                    reply.after(Duration::from_millis(park.min(wait)))
                } else {
                    reply
                };
            }
            if rest.ends_with("/heartbeat") {
                let held: Vec<String> = serde_json::from_value(req.body["held"].clone()).unwrap();
                let cancel: Vec<String> = self
                    .cancel
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|t| held.contains(t))
                    .cloned()
                    .collect();
                return Reply::ok(json!({ "cancel": cancel }));
            }
            if req.method == "DELETE" {
                return Reply::ok(json!({}));
            }
        }
        if path.starts_with("/v1/tasks/") && path.ends_with("/result") {
            return self.result_reply();
        }
        Reply::error(404, "NOT_FOUND")
    }

    /// The next scripted answer to a result (accepted when none is left).
    fn result_reply(&self) -> Reply {
        self.results
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| Reply::ok(json!({"accepted": true})))
    }
}

async fn fake(proto: &Arc<Proto>) -> Fake {
    let p = Arc::clone(proto);
    Fake::start(move |req, _| p.answer(req)).await
}

fn task(token: &str, name: &str) -> Value {
    json!({
        "token": token, "execution_id": "u-1", "workflow": "Plain", "workflow_version": "1.0.0",
        "step_id": "work", "task_name": name, "contract_version": "1.0.0", "input": {"n": 1},
        "idempotency_key": "u-1/work", "attempt": 1, "redelivery": false
    })
}

/// A worker that reports each result with the result call.
fn builder(id: &str) -> WorkerBuilder {
    on_poll(id).results_on_poll(false)
}

/// A worker as the SDK builds it by default: results ride on polls.
fn on_poll(id: &str) -> WorkerBuilder {
    Worker::builder(id)
        .poll_wait(Duration::from_millis(50))
        .heartbeat_interval(Duration::from_millis(20))
        .backoff(FAST)
        .shutdown_grace(Duration::from_secs(2))
}

/// Every result the worker carried on its polls, in order.
fn carried(fake: &Fake) -> Vec<Value> {
    fake.matching("POST", "/v1/workers/")
        .into_iter()
        .filter(|r| r.path.ends_with("/poll"))
        .flat_map(|r| r.body["results"].as_array().cloned().unwrap_or_default())
        .collect()
}

/// Runs a worker in the background; send on the returned channel to stop it.
fn spawn(
    worker: Worker,
) -> (
    oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), Error>>,
) {
    let (tx, rx) = oneshot::channel::<()>();
    let handle = tokio::spawn(async move {
        worker
            .run(async move {
                let _ = rx.await;
            })
            .await
    });
    (tx, handle)
}

fn results(fake: &Fake) -> Vec<Req> {
    fake.matching("POST", "/v1/tasks/")
}

#[tokio::test]
async fn handler_gets_the_task_and_results_are_retried_until_answered() {
    let proto = Arc::new(Proto::default());
    let mut t = task("tok-1", "demo.work");
    t["attempt"] = json!(2);
    t["redelivery"] = json!(true);
    t["idempotency_key"] = json!("charge-o-1");
    proto.tasks.lock().unwrap().push_back(t);
    proto.results.lock().unwrap().extend([
        Reply::error(503, "STORAGE_ERROR"),
        Reply::error(500, "INTERNAL"),
    ]);
    let fake = fake(&proto).await;
    let (seen_tx, mut seen_rx) = mpsc::unbounded_channel::<Task>();
    let worker = builder("w-1")
        .handler("demo.work", move |task: Task| {
            let seen = seen_tx.clone();
            async move {
                let n = task.input["n"].as_i64().unwrap_or(0);
                seen.send(task).unwrap();
                Ok(json!({ "doubled": n * 2 }))
            }
        })
        .connect(&fake.url())
        .unwrap();
    let (stop, handle) = spawn(worker);
    let got = seen_rx.recv().await.unwrap();
    assert_eq!(got.token, "tok-1");
    assert_eq!(got.idempotency_key, "charge-o-1");
    assert_eq!(got.attempt, 2);
    assert!(got.redelivery);
    assert_eq!(got.step_id, "work");
    fake.until("three result posts", |r| {
        r.iter()
            .filter(|r| r.path.starts_with("/v1/tasks/"))
            .count()
            >= 3
    })
    .await;
    // Accepted at the third try: no more posts.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let posts = results(&fake);
    assert_eq!(posts.len(), 3);
    for p in &posts {
        assert_eq!(p.path, "/v1/tasks/tok-1/result");
        assert_eq!(p.body, json!({"output": {"doubled": 2}}));
    }
    stop.send(()).unwrap();
    handle.await.unwrap().unwrap();
    let reqs = fake.requests();
    let register = &reqs[0];
    assert_eq!(register.path, "/v1/workers");
    assert_eq!(
        register.body,
        json!({"worker_id": "w-1", "task_patterns": ["demo.work"], "max_tasks": 4})
    );
    assert_eq!(reqs.last().unwrap().method, "DELETE");
    assert_eq!(reqs.last().unwrap().path, "/v1/workers/s1");
}

#[tokio::test]
async fn accepted_false_is_final() {
    let proto = Arc::new(Proto::default());
    proto
        .tasks
        .lock()
        .unwrap()
        .push_back(task("tok-1", "demo.work"));
    proto.results.lock().unwrap().push_back(Reply::ok(
        json!({"accepted": false, "reason": "duplicate result; step already resolved"}),
    ));
    let fake = fake(&proto).await;
    let worker = builder("w-1")
        .handler("demo.work", |_t: Task| async {
            Err(TaskError::retryable("FLAKY", "try again"))
        })
        .connect(&fake.url())
        .unwrap();
    let (stop, handle) = spawn(worker);
    fake.until("one result post", |r| {
        r.iter().any(|r| r.path.starts_with("/v1/tasks/"))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    let posts = results(&fake);
    assert_eq!(posts.len(), 1);
    assert_eq!(
        posts[0].body,
        json!({"error": {"code": "FLAKY", "message": "try again", "retryable": true}})
    );
    // The token is no longer held once the server answered.
    let heartbeats = fake.matching("POST", "/v1/workers/s1/heartbeat");
    let last = heartbeats.last().unwrap();
    assert_eq!(last.body, json!({"held": []}));
    stop.send(()).unwrap();
    handle.await.unwrap().unwrap();
}

#[tokio::test]
async fn unknown_session_registers_again_and_reattaches_held_tokens() {
    let proto = Arc::new(Proto::default());
    proto
        .tasks
        .lock()
        .unwrap()
        .push_back(task("tok-1", "demo.work"));
    let fake = fake(&proto).await;
    let release = Arc::new(Notify::new());
    let gate = Arc::clone(&release);
    let worker = builder("w-1")
        .heartbeat_interval(Duration::from_secs(60)) // only the re-attach heartbeat
        .handler("demo.work", move |_t: Task| {
            let gate = Arc::clone(&gate);
            async move {
                gate.notified().await;
                Ok(json!("done"))
            }
        })
        .connect(&fake.url())
        .unwrap();
    let (stop, handle) = spawn(worker.clone());
    fake.until("a poll listing the held token", |r| {
        r.iter()
            .any(|r| r.path.ends_with("/poll") && r.body["held"] == json!(["tok-1"]))
    })
    .await;
    assert_eq!(worker.held_tokens(), vec!["tok-1".to_string()]);
    // The server forgets the session (a restart).
    proto.unknown.lock().unwrap().insert("s1".into());
    fake.until("a heartbeat on the new session re-attaching tok-1", |r| {
        r.iter()
            .any(|r| r.path == "/v1/workers/s2/heartbeat" && r.body == json!({"held": ["tok-1"]}))
    })
    .await;
    assert_eq!(proto.registrations.load(Ordering::SeqCst), 2);
    release.notify_one();
    fake.until("the result", |r| {
        r.iter().any(|r| r.path == "/v1/tasks/tok-1/result")
    })
    .await;
    assert_eq!(results(&fake)[0].body, json!({"output": "done"}));
    // Polls continue on the new session.
    fake.until("a poll on s2", |r| {
        r.iter().any(|r| r.path == "/v1/workers/s2/poll")
    })
    .await;
    stop.send(()).unwrap();
    handle.await.unwrap().unwrap();
    assert_eq!(fake.requests().last().unwrap().path, "/v1/workers/s2");
}

/// Sets a flag when dropped: proves a handler future was stopped.
struct DropFlag(Arc<AtomicUsize>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn the_cancel_list_stops_the_handler_and_reports_cancelled() {
    let proto = Arc::new(Proto::default());
    proto
        .tasks
        .lock()
        .unwrap()
        .push_back(task("tok-1", "demo.work"));
    let fake = fake(&proto).await;
    let dropped = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(Notify::new());
    let (d, s) = (Arc::clone(&dropped), Arc::clone(&started));
    let worker = builder("w-1")
        .handler("demo.work", move |_t: Task| {
            let flag = DropFlag(Arc::clone(&d));
            let started = Arc::clone(&s);
            async move {
                let _flag = flag;
                started.notify_one();
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok(json!("never"))
            }
        })
        .connect(&fake.url())
        .unwrap();
    let (stop, handle) = spawn(worker);
    started.notified().await;
    proto.cancel.lock().unwrap().push("tok-1".into());
    fake.until("the CANCELLED result", |r| {
        r.iter().any(|r| r.path == "/v1/tasks/tok-1/result")
    })
    .await;
    assert_eq!(
        results(&fake)[0].body,
        json!({"error": {"code": "CANCELLED", "retryable": false}})
    );
    assert_eq!(dropped.load(Ordering::SeqCst), 1, "the handler was stopped");
    stop.send(()).unwrap();
    handle.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_finished_handler_on_the_cancel_list_reports_its_output() {
    let proto = Arc::new(Proto::default());
    proto
        .tasks
        .lock()
        .unwrap()
        .push_back(task("tok-1", "demo.work"));
    // The server is unavailable for results for a while; meanwhile every
    // heartbeat cancels the token.
    for _ in 0..6 {
        proto
            .results
            .lock()
            .unwrap()
            .push_back(Reply::error(503, "STORAGE_ERROR"));
    }
    proto.cancel.lock().unwrap().push("tok-1".into());
    let fake = fake(&proto).await;
    let worker = builder("w-1")
        .heartbeat_interval(Duration::from_millis(5))
        .handler("demo.work", |_t: Task| async {
            Ok(json!({"charged": true}))
        })
        .connect(&fake.url())
        .unwrap();
    let (stop, handle) = spawn(worker);
    fake.until("seven result posts", |r| {
        r.iter()
            .filter(|r| r.path.starts_with("/v1/tasks/"))
            .count()
            >= 7
    })
    .await;
    for p in results(&fake) {
        assert_eq!(p.body, json!({"output": {"charged": true}}));
    }
    stop.send(()).unwrap();
    handle.await.unwrap().unwrap();
}

/// A fake server holding six `demo.work` tasks, `tok-0` … `tok-5`.
async fn six_tasks(proto: &Arc<Proto>) -> Fake {
    for i in 0..6 {
        proto
            .tasks
            .lock()
            .unwrap()
            .push_back(task(&format!("tok-{i}"), "demo.work"));
    }
    fake(proto).await
}

/// A worker running at most two tasks at once, each taking `ms`, and the
/// peak number it ran together.
fn two_at_a_time(builder: WorkerBuilder, fake: &Fake, ms: u64) -> (Worker, Arc<AtomicUsize>) {
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (r, p) = (Arc::clone(&running), Arc::clone(&peak));
    let worker = builder
        .max_tasks(2)
        .handler("demo.work", move |_t: Task| {
            let (running, peak) = (Arc::clone(&r), Arc::clone(&p));
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                Ok(json!(null))
            }
        })
        .connect(&fake.url())
        .unwrap();
    (worker, peak)
}

/// Every poll asked for at least one task and never more than the free
/// slots of a worker of `max_tasks`.
fn assert_polls_ask_only_for_free_slots(fake: &Fake, max_tasks: usize) {
    for poll in fake.matching("POST", "/v1/workers/s1/poll") {
        let asked = poll.body["max_tasks"].as_u64().unwrap() as usize;
        let held = poll.body["held"].as_array().unwrap().len();
        assert!(
            asked >= 1 && asked + held <= max_tasks,
            "poll {:?}",
            poll.body
        );
    }
}

#[tokio::test]
async fn max_tasks_bounds_concurrency_and_polls_ask_only_for_free_slots() {
    let proto = Arc::new(Proto::default());
    let fake = six_tasks(&proto).await;
    let (worker, peak) = two_at_a_time(builder("w-1"), &fake, 200);
    let (stop, handle) = spawn(worker);
    fake.until("six results", |r| {
        r.iter()
            .filter(|r| r.path.starts_with("/v1/tasks/"))
            .count()
            >= 6
    })
    .await;
    assert_eq!(peak.load(Ordering::SeqCst), 2);
    assert_polls_ask_only_for_free_slots(&fake, 2);
    assert_eq!(fake.matching("POST", "/v1/workers")[0].body["max_tasks"], 2);
    stop.send(()).unwrap();
    handle.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_server_that_is_down_at_start_is_waited_for() {
    let addr = dead_port().await;
    let proto = Arc::new(Proto::default());
    proto
        .tasks
        .lock()
        .unwrap()
        .push_back(task("tok-1", "demo.work"));
    let worker = builder("w-1")
        .handler("demo.work", |_t: Task| async { Ok(json!(1)) })
        .connect(&format!("http://{addr}"))
        .unwrap();
    let (stop, handle) = spawn(worker);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let p = Arc::clone(&proto);
    let fake = Fake::on(listener, move |req, _| p.answer(req));
    fake.until("the result", |r| {
        r.iter().any(|r| r.path == "/v1/tasks/tok-1/result")
    })
    .await;
    stop.send(()).unwrap();
    handle.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_refused_registration_ends_run_with_the_error() {
    let proto = Arc::new(Proto::default());
    *proto.register_reply.lock().unwrap() = Some(Reply::error(403, "FORBIDDEN"));
    let fake = fake(&proto).await;
    let worker = builder("w-1")
        .patterns(vec!["payments.*".into()])
        .handler("payments.charge", |_t: Task| async { Ok(json!(1)) })
        .connect(&fake.url())
        .unwrap();
    let err = worker.run(std::future::pending()).await.unwrap_err();
    assert_eq!(err.code(), Some("FORBIDDEN"));
    assert_eq!(
        fake.requests()[0].body["task_patterns"],
        json!(["payments.*"])
    );
}

#[tokio::test]
async fn a_task_without_handler_fails_retryably() {
    let proto = Arc::new(Proto::default());
    proto
        .tasks
        .lock()
        .unwrap()
        .push_back(task("tok-1", "other.task"));
    let fake = fake(&proto).await;
    let worker = builder("w-1")
        .patterns(vec!["*".into()])
        .handler("demo.work", |_t: Task| async { Ok(json!(1)) })
        .connect(&fake.url())
        .unwrap();
    let (stop, handle) = spawn(worker);
    fake.until("the result", |r| {
        r.iter().any(|r| r.path == "/v1/tasks/tok-1/result")
    })
    .await;
    let body = &results(&fake)[0].body;
    assert_eq!(body["error"]["code"], "NO_HANDLER");
    assert_eq!(body["error"]["retryable"], true);
    stop.send(()).unwrap();
    handle.await.unwrap().unwrap();
}

#[tokio::test]
async fn shutdown_lets_running_tasks_finish_then_unregisters() {
    let proto = Arc::new(Proto::default());
    proto
        .tasks
        .lock()
        .unwrap()
        .push_back(task("tok-1", "demo.work"));
    let fake = fake(&proto).await;
    let started = Arc::new(Notify::new());
    let s = Arc::clone(&started);
    let worker = builder("w-1")
        .handler("demo.work", move |_t: Task| {
            let s = Arc::clone(&s);
            async move {
                s.notify_one();
                tokio::time::sleep(Duration::from_millis(150)).await;
                Ok(json!("finished"))
            }
        })
        .connect(&fake.url())
        .unwrap();
    let (stop, handle) = spawn(worker);
    started.notified().await;
    stop.send(()).unwrap();
    handle.await.unwrap().unwrap();
    let reqs = fake.requests();
    let result_at = reqs
        .iter()
        .position(|r| r.path == "/v1/tasks/tok-1/result")
        .expect("the result was reported before unregistering");
    let delete_at = reqs.iter().position(|r| r.method == "DELETE").unwrap();
    assert!(result_at < delete_at);
    assert_eq!(reqs[result_at].body, json!({"output": "finished"}));
}

#[tokio::test]
async fn polls_wait_at_most_half_the_session_timeout() {
    let proto = Arc::new(Proto::default()); // session_timeout_ms: 3000
    let fake = fake(&proto).await;
    let worker = builder("w-1")
        .poll_wait(Duration::from_secs(10))
        .handler("demo.work", |_t: Task| async { Ok(json!(1)) })
        .connect(&fake.url())
        .unwrap();
    let (stop, handle) = spawn(worker);
    fake.until("a poll", |r| r.iter().any(|r| r.path.ends_with("/poll")))
        .await;
    let polls = fake.matching("POST", "/v1/workers/s1/poll");
    assert_eq!(polls[0].body["wait_ms"], 1500);
    stop.send(()).unwrap();
    handle.await.unwrap().unwrap();
}

#[tokio::test]
async fn results_ride_on_polls_and_are_retried_until_answered() {
    let proto = Arc::new(Proto::default());
    proto
        .tasks
        .lock()
        .unwrap()
        .push_back(task("tok-1", "demo.work"));
    proto.results.lock().unwrap().extend([
        Reply::error(503, "STORAGE_ERROR"),
        Reply::error(500, "INTERNAL"),
    ]);
    let fake = fake(&proto).await;
    let worker = on_poll("w-1")
        .handler("demo.work", |_t: Task| async { Ok(json!({"doubled": 2})) })
        .connect(&fake.url())
        .unwrap();
    let (stop, handle) = spawn(worker);
    fake.until("three carried results", |_| carried(&fake).len() >= 3)
        .await;
    // Answered at the third try: carried no more, and never sent alone.
    tokio::time::sleep(Duration::from_millis(150)).await;
    let carried = carried(&fake);
    assert_eq!(carried.len(), 3, "{carried:?}");
    for r in &carried {
        assert_eq!(r, &json!({"token": "tok-1", "output": {"doubled": 2}}));
    }
    assert!(results(&fake).is_empty());
    // The token is no longer held once the server answered.
    let last = fake.matching("POST", "/v1/workers/s1/heartbeat");
    assert_eq!(last.last().unwrap().body, json!({"held": []}));
    stop.send(()).unwrap();
    handle.await.unwrap().unwrap();
}

/// A fake server that parks polls for 5 s and holds one task, `tok-1`.
async fn parked_with_one_task() -> Fake {
    let proto = Arc::new(Proto::default());
    proto.park_ms.store(5_000, Ordering::SeqCst);
    proto
        .tasks
        .lock()
        .unwrap()
        .push_back(task("tok-1", "demo.work"));
    fake(&proto).await
}

#[tokio::test]
async fn a_finished_result_does_not_wait_behind_a_parked_poll() {
    let fake = parked_with_one_task().await;
    let finished = Arc::new(Mutex::new(None));
    let f = Arc::clone(&finished);
    // Eight slots: four polls wait at the server (two slots each), and one
    // more replaces the one that brought the task once it stops lingering.
    let worker = on_poll("w-1")
        .max_tasks(8)
        .poll_wait(Duration::from_secs(10))
        .handler("demo.work", move |_t: Task| {
            let f = Arc::clone(&f);
            async move {
                // Long enough for the next long poll to park at the server.
                tokio::time::sleep(Duration::from_millis(200)).await;
                *f.lock().unwrap() = Some(tokio::time::Instant::now());
                Ok(json!(1))
            }
        })
        .connect(&fake.url())
        .unwrap();
    let (stop, handle) = spawn(worker);
    fake.until("a carried result", |_| !carried(&fake).is_empty())
        .await;
    let sent_within = finished.lock().unwrap().unwrap().elapsed();
    assert!(
        sent_within < Duration::from_millis(500),
        "the result waited {sent_within:?}"
    );
    let polls = fake.matching("POST", "/v1/workers/s1/poll");
    let carrying = polls
        .iter()
        .find(|p| p.body.get("results").is_some())
        .unwrap();
    // Four polls were waiting: this one does not wait, and asks only for
    // the slot its result frees.
    assert_eq!(carrying.body["wait_ms"], 0, "{:?}", carrying.body);
    assert!(polls
        .iter()
        .any(|p| p.body.get("results").is_none() && p.body["wait_ms"].as_u64() > Some(0)));
    stop.send(()).unwrap();
    handle.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_quick_result_rides_on_a_waiting_poll_instead_of_a_poll_of_its_own() {
    let fake = parked_with_one_task().await;
    let worker = on_poll("w-1")
        .poll_wait(Duration::from_secs(10))
        .handler("demo.work", |_t: Task| async { Ok(json!(1)) })
        .connect(&fake.url())
        .unwrap();
    let (stop, handle) = spawn(worker);
    fake.until("a carried result", |_| !carried(&fake).is_empty())
        .await;
    let polls = fake.matching("POST", "/v1/workers/s1/poll");
    // Four polls wait (one slot each); the first brings the task. Its
    // result then leaves on the next poll, which takes that poll's place
    // at the server: no results-free poll is sent in between (this fake
    // answers it at once, so another may follow it).
    assert!(polls.len() >= 5, "{polls:?}");
    for p in &polls[..4] {
        assert!(p.body.get("results").is_none(), "{:?}", p.body);
        assert_eq!(p.body["max_tasks"], 1, "{:?}", p.body);
    }
    assert_eq!(
        polls[4].body["results"],
        json!([{"token": "tok-1", "output": 1}])
    );
    assert_eq!(polls[4].body["wait_ms"], 1_000, "{:?}", polls[4].body);
    assert_eq!(polls[4].body["max_tasks"], 1, "{:?}", polls[4].body);
    stop.send(()).unwrap();
    handle.await.unwrap().unwrap();
}

#[tokio::test]
async fn max_tasks_bounds_concurrency_with_results_on_polls() {
    let proto = Arc::new(Proto::default());
    let fake = six_tasks(&proto).await;
    let (worker, peak) = two_at_a_time(on_poll("w-1"), &fake, 100);
    let (stop, handle) = spawn(worker);
    fake.until("six carried results", |_| carried(&fake).len() >= 6)
        .await;
    assert_eq!(peak.load(Ordering::SeqCst), 2);
    let mut tokens: Vec<String> = carried(&fake)
        .iter()
        .map(|r| r["token"].as_str().unwrap().to_owned())
        .collect();
    tokens.sort();
    assert_eq!(
        tokens,
        ["tok-0", "tok-1", "tok-2", "tok-3", "tok-4", "tok-5"]
    );
    assert!(results(&fake).is_empty());
    assert_polls_ask_only_for_free_slots(&fake, 2);
    stop.send(()).unwrap();
    handle.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_worker_shutting_down_reports_with_the_result_call() {
    let proto = Arc::new(Proto::default());
    proto
        .tasks
        .lock()
        .unwrap()
        .push_back(task("tok-1", "demo.work"));
    let fake = fake(&proto).await;
    let started = Arc::new(Notify::new());
    let s = Arc::clone(&started);
    let worker = on_poll("w-1")
        .handler("demo.work", move |_t: Task| {
            let s = Arc::clone(&s);
            async move {
                s.notify_one();
                tokio::time::sleep(Duration::from_millis(150)).await;
                Ok(json!("finished"))
            }
        })
        .connect(&fake.url())
        .unwrap();
    let (stop, handle) = spawn(worker);
    started.notified().await;
    stop.send(()).unwrap();
    handle.await.unwrap().unwrap();
    let reqs = fake.requests();
    let result_at = reqs
        .iter()
        .position(|r| r.path == "/v1/tasks/tok-1/result")
        .expect("the result was reported before unregistering");
    let delete_at = reqs.iter().position(|r| r.method == "DELETE").unwrap();
    assert!(result_at < delete_at);
    assert!(carried(&fake).is_empty());
}

#[tokio::test]
async fn a_server_refusing_results_on_polls_gets_the_result_call() {
    let proto = Arc::new(Proto::default());
    proto.refuse_results.store(true, Ordering::SeqCst);
    for token in ["tok-1", "tok-2"] {
        proto
            .tasks
            .lock()
            .unwrap()
            .push_back(task(token, "demo.work"));
    }
    let fake = fake(&proto).await;
    let worker = on_poll("w-1")
        .max_tasks(1)
        .handler("demo.work", |_t: Task| async { Ok(json!(1)) })
        .connect(&fake.url())
        .unwrap();
    let (stop, handle) = spawn(worker);
    fake.until("two result posts", |r| {
        r.iter()
            .filter(|r| r.path.starts_with("/v1/tasks/"))
            .count()
            >= 2
    })
    .await;
    // Refused once, then the worker stopped carrying results.
    assert_eq!(carried(&fake).len(), 1);
    stop.send(()).unwrap();
    handle.await.unwrap().unwrap();
}

/// Many quick tasks on a runtime with several threads: a handler may
/// finish on another thread while the poll that brought its task is still
/// being answered. Its result must still ride on a poll, not go out with
/// the result call because that poll's slots looked taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_result_finished_while_its_poll_is_answered_still_rides_on_a_poll() {
    let proto = Arc::new(Proto::default());
    proto.park_ms.store(5_000, Ordering::SeqCst);
    {
        let mut tasks = proto.tasks.lock().unwrap();
        for i in 0..300 {
            tasks.push_back(task(&format!("tok-{i}"), "demo.work"));
        }
    }
    let fake = fake(&proto).await;
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (r, p) = (Arc::clone(&running), Arc::clone(&peak));
    let worker = on_poll("w-1")
        .poll_wait(Duration::from_secs(10))
        .handler("demo.work", move |_t: Task| {
            let (r, p) = (Arc::clone(&r), Arc::clone(&p));
            async move {
                p.fetch_max(r.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                tokio::task::yield_now().await;
                r.fetch_sub(1, Ordering::SeqCst);
                Ok(json!(1))
            }
        })
        .connect(&fake.url())
        .unwrap();
    let (stop, handle) = spawn(worker);
    fake.until("every result", |_| {
        carried(&fake).len() + results(&fake).len() >= 300
    })
    .await;
    assert_eq!(results(&fake).len(), 0, "results sent with the result call");
    // Still never more tasks than `max_tasks` (4 by default).
    assert!(peak.load(Ordering::SeqCst) <= 4);
    assert_polls_ask_only_for_free_slots(&fake, 4);
    stop.send(()).unwrap();
    handle.await.unwrap().unwrap();
}
