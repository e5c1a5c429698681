"""Every acknowledged command takes effect once (docs/processes.md#each-command-takes-effect-once):
a submit whose answer was lost and is made again, by the store's retry after a cut connection
or by a new process after a kill, queues its task once; an interrupt stored again is acted on
once. The cut is real: a TCP proxy between a front end and PostgreSQL lets the inbox insert's
``COMMIT`` reach the server and drops its answer."""

from __future__ import annotations

import contextlib
import queue
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from scripted import HELPER_SCRIPT, call
from support import POSTGRES_URL, StoreFactory, process
from support import wait_for_event as wait_for

import plait
from plait.actors import ModelSettings
from plait.events import (
    Command,
    ConversationDestroyed,
    DestroyConversation,
    Event,
    EventStore,
    InputText,
    InterruptTask,
    SubmitTask,
    TaskCompleted,
    TaskEnqueued,
    TaskPlan,
    TurnAborted,
)
from plait.events.stores import PostgresStore
from plait.events.stores._postgres_sql import APPEND_SIGNATURE
from plait.replay import replay
from plait.runtime import Runtime, RuntimeSettings
from plait.testing import ScriptedModelServer, Step

WAIT_SEC = 30.0


class CuttingProxy:
    """A TCP forwarder to PostgreSQL. Armed with a marker, it watches for a connection that
    sends the marker (the inbox insert's data), lets that connection's next ``COMMIT`` reach
    the server, drops the server's answer and closes both sides (``cut`` is then set).
    Connections made after the cut wait until ``let_in``: the test decides when the front end
    reconnects to look whether its command landed."""

    def __init__(self) -> None:
        target = POSTGRES_URL.rpartition("@")[2].partition("/")[0]
        host, _, port = target.partition(":")
        self._target = (host, int(port or 5432))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._marker: bytes | None = None
        self._open = threading.Event()
        self._open.set()
        self.cut = threading.Event()
        """Set once the armed connection was cut after its commit."""
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()

    def url(self, schema: str) -> str:
        """A store URL through the proxy (no TLS: the proxy reads what passes)."""
        database = POSTGRES_URL.rpartition("/")[2].partition("?")[0]
        user = POSTGRES_URL.partition("://")[2].partition("@")[0]
        return (
            f"postgresql://{user}@127.0.0.1:{self.port}/{database}"
            f"?sslmode=disable&schema={schema}&outage_sec={WAIT_SEC:g}"
        )

    def arm(self, marker: bytes) -> None:
        """Cut the next connection that sends ``marker``, once its transaction commits."""
        self._marker = marker

    def let_in(self) -> None:
        """Let connections made since the cut through."""
        self._open.set()

    def close(self) -> None:
        self._open.set()
        with self._lock:
            for sock in [self._listener, *self._sockets]:
                with contextlib.suppress(OSError):
                    sock.close()

    def __enter__(self) -> CuttingProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        if not self._open.wait(WAIT_SEC):
            client.close()
            return
        server = socket.create_connection(self._target)
        with self._lock:
            self._sockets += [client, server]
        dropping = threading.Event()  # the answer to the armed connection's COMMIT
        threading.Thread(
            target=self._upstream, args=(client, server, dropping), daemon=True
        ).start()
        while True:
            try:
                data = server.recv(65536)
                if not data:
                    break
                if dropping.is_set():
                    break  # the commit is done: its answer is lost with the connection
                client.sendall(data)
            except OSError:
                break
        for sock in (client, server):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        if dropping.is_set():
            self.cut.set()

    def _upstream(
        self, client: socket.socket, server: socket.socket, dropping: threading.Event
    ) -> None:
        inserting = False
        while True:
            try:
                data = client.recv(65536)
                if not data:
                    break
                marker = self._marker
                if marker is not None and marker in data:
                    inserting = True
                elif inserting and b"COMMIT" in data:
                    self._open.clear()  # the front end's next connection waits
                    self._marker = None
                    dropping.set()
                server.sendall(data)
            except OSError:
                break
        with contextlib.suppress(OSError):
            server.shutdown(socket.SHUT_WR)


@pytest.fixture
def postgres(tmp_path: Path) -> Iterator[StoreFactory]:
    factory = StoreFactory("postgres", tmp_path)
    yield factory
    factory.close()


@contextlib.contextmanager
def front_end(
    proxy: CuttingProxy, stores: StoreFactory, server: ScriptedModelServer
) -> Iterator[Runtime]:
    """A runtime whose store connection runs through ``proxy``: a front end that only follows."""
    settings = ModelSettings(base_url=server.base_url, api_key="k", model="m")
    store = PostgresStore(proxy.url(stores.schema))
    runtime = Runtime(
        store, RuntimeSettings(model=settings, owner_id="front", expire_every_sec=None)
    )
    try:
        yield runtime
    finally:
        runtime.close()
        store.close()


def in_thread(work: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    """Run ``work`` in a thread; its result lands in the list."""
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(work()), daemon=True)
    thread.start()
    return thread, result


def until(done: Callable[[], object], what: str) -> None:
    """Return once ``done()`` holds, looking every 20 ms (nothing signals it), failing with
    ``what`` after ``WAIT_SEC``."""
    deadline = time.monotonic() + WAIT_SEC
    pause = threading.Event()
    while not done():
        assert time.monotonic() < deadline, what
        pause.wait(0.02)


def inbox_emptied(store: EventStore, stream: str) -> None:
    """Return once ``stream``'s inbox is empty (the owner took and dropped what was there)."""
    until(lambda: not store.inbox.commands(stream), f"session {stream}: its inbox was not emptied")


def first_of(store: EventStore, stream: str, task_id: str, *kinds: type) -> Event:
    """The first event of ``task_id`` of one of ``kinds``, waited for."""
    with store.subscribe() as tail:
        while (event := tail.get(timeout=WAIT_SEC)) is not None:
            if (
                event.stream == stream
                and event.task_id == task_id
                and isinstance(event.body, kinds)
            ):
                return event
    raise AssertionError(f"session {stream}: no {kinds} of task {task_id} within {WAIT_SEC} s")


def task_end(store: EventStore, stream: str, task_id: str) -> Event:
    """The event that ended ``task_id`` (``TaskCompleted`` or ``TurnAborted``), waited for."""
    return first_of(store, stream, task_id, TaskCompleted, TurnAborted)


def of_kind(store: EventStore, stream: str, kind: type) -> list[str | None]:
    """The task ids of ``stream``'s events of ``kind``, in order."""
    return [e.task_id for e in store.read(stream) if isinstance(e.body, kind)]


class Noted:
    """A function tool with a side effect: it appends a line to a file."""

    def __init__(self, path: Path) -> None:
        self.path = path

        @plait.tool
        def note(line: str) -> str:
            """Write a line down."""
            with self.path.open("a") as out:
                out.write(line + "\n")
            return "noted"

        self.tool = note

    def lines(self) -> list[str]:
        return self.path.read_text().splitlines() if self.path.exists() else []


class Held:
    """A function tool that waits until the test lets call ``n`` return."""

    def __init__(self) -> None:
        self.entered: queue.Queue[int] = queue.Queue()
        self.gates = {n: threading.Event() for n in range(1, 4)}

        @plait.tool
        def hold(n: int) -> str:
            """Hold on."""
            self.entered.put(n)
            self.gates[n].wait(WAIT_SEC)
            return f"held {n}"

        self.tool = hold

    def running(self, n: int) -> None:
        assert self.entered.get(timeout=WAIT_SEC) == n

    def release(self) -> None:
        for gate in self.gates.values():
            gate.set()


def ran_once_and_replays(noted: Noted, stores: StoreFactory, sid: str) -> None:
    """The noting tool ran once, and session ``sid`` verifies and replays clean."""
    assert noted.lines() == ["once"]
    check = stores.open()
    assert check.verify(sid).ok
    result = replay(check, sid, timeout=10, tools=[noted.tool])
    assert result.divergence is None, result.divergence


# --- a submit -------------------------------------------------------------------------------


def test_a_submit_whose_commit_answer_was_lost_runs_once(
    postgres: StoreFactory, server: ScriptedModelServer, tmp_path: Path
) -> None:
    noted = Noted(tmp_path / "ran.txt")
    server.push(Step(tool_calls=[call("note", line="once")]), Step(text="noted it"))
    with (
        process(postgres, server, "worker", tools=[noted.tool]) as worker,
        CuttingProxy() as proxy,
        front_end(proxy, postgres, server) as front,
    ):
        store = worker.store
        sid = worker.start_session().session_id
        followed = front.follow(sid)
        proxy.arm(b"cut after this")
        thread, submitted = in_thread(lambda: followed.submit("cut after this"))
        assert proxy.cut.wait(WAIT_SEC)
        # While the front end waits to reconnect, the owner takes the command, records its
        # task, deletes the command and runs the task.
        task_id = wait_for(store, sid, TaskEnqueued).task_id
        assert task_id is not None
        assert isinstance(task_end(store, sid, task_id).body, TaskCompleted)
        inbox_emptied(store, sid)
        proxy.let_in()
        thread.join(WAIT_SEC)
        assert submitted == [task_id]  # one id, acknowledged
        # Anything stored by the retry is taken before a later command: run one, and look.
        server.push(Step(text="later"))
        later = followed.submit("later")
        task_end(store, sid, later)
        assert of_kind(store, sid, TaskEnqueued) == [task_id, later]
        assert of_kind(store, sid, TaskCompleted) == [task_id, later]
        assert store.inbox.commands(sid) == []
    ran_once_and_replays(noted, postgres, sid)


def test_an_owner_never_queues_a_task_its_session_holds(
    durable_stores: StoreFactory, server: ScriptedModelServer
) -> None:
    server.push(Step(text="one"), Step(text="two"))
    with process(durable_stores, server, "a") as a:
        session = a.start_session()
        sid, root = session.session_id, session.root_conversation_id
        plan = TaskPlan("task-1", root, [InputText("hi")])
        assert a.sessions.hosts[sid].queue(plan) == "task-1"
        task_end(a.store, sid, "task-1")
        # The same command stored again (a retry that found nothing of it), then another.
        store = durable_stores.open()
        store.inbox.put(sid, Command(SubmitTask(plan), sender="front"))
        second = TaskPlan("task-2", root, [InputText("next")])
        store.inbox.put(sid, Command(SubmitTask(second), sender="front"))
        assert isinstance(task_end(store, sid, "task-2").body, TaskCompleted)
        inbox_emptied(store, sid)
        assert of_kind(store, sid, TaskEnqueued) == ["task-1", "task-2"]
        assert of_kind(store, sid, TaskCompleted) == ["task-1", "task-2"]
        assert store.verify(sid).ok


def test_a_submit_naming_a_task_the_session_holds_queues_nothing(
    durable_stores: StoreFactory, server: ScriptedModelServer
) -> None:
    server.push(Step(text="one"))
    with process(durable_stores, server, "a") as a:
        session = a.start_session()
        sid = session.session_id
        assert session.submit("hi", task_id="mine") == "mine"
        assert session.submit("hi", task_id="mine") == "mine"  # made again: acknowledged
        task_end(a.store, sid, "mine")
        assert session.submit("hi", task_id="mine") == "mine"  # and once it ended
        assert of_kind(a.store, sid, TaskEnqueued) == ["mine"]
        assert of_kind(a.store, sid, TaskCompleted) == ["mine"]


SUBMITTER = textwrap.dedent(
    """
    import sys
    from plait.actors._model import ModelSettings
    from plait.runtime import Runtime, RuntimeSettings

    url, session_id, task_id, then = sys.argv[1:5]
    settings = ModelSettings(base_url="http://127.0.0.1:9/v1", api_key="k")  # never asked
    runtime = Runtime(
        url, RuntimeSettings(model=settings, owner_id=f"front-{then}", expire_every_sec=None)
    )
    runtime.follow(session_id).submit("cut after this", task_id=task_id)
    if then == "hang":  # killed here: the command is stored, its caller never heard of it
        sys.stdin.read()
    print("submitted", flush=True)
    runtime.close()
    """
)


def test_a_submit_made_again_by_a_new_process_after_a_kill_runs_once(
    durable_stores: StoreFactory, server: ScriptedModelServer, tmp_path: Path
) -> None:
    noted = Noted(tmp_path / "ran.txt")
    server.push(Step(tool_calls=[call("note", line="once")]), Step(text="noted it"))
    with process(durable_stores, server, "worker", tools=[noted.tool]) as worker:
        store = worker.store
        session = worker.start_session()
        sid = session.session_id
        url = durable_stores.url
        command = [sys.executable, "-c", SUBMITTER, url, sid, "task-1"]
        with subprocess.Popen([*command, "hang"], stdin=subprocess.PIPE, text=True) as first:
            wait_for(store, sid, TaskEnqueued, timeout=WAIT_SEC)
            first.send_signal(signal.SIGKILL)
            assert first.wait(WAIT_SEC) == -signal.SIGKILL
        assert isinstance(task_end(store, sid, "task-1").body, TaskCompleted)
        again = subprocess.run(
            [*command, "print"], capture_output=True, text=True, timeout=WAIT_SEC
        )
        assert again.returncode == 0, again.stderr
        assert again.stdout == "submitted\n"
        server.push(Step(text="later"))
        later = session.submit("later")
        task_end(store, sid, later)
        inbox_emptied(store, sid)
        assert of_kind(store, sid, TaskEnqueued) == ["task-1", later]
        assert of_kind(store, sid, TaskCompleted) == ["task-1", later]
    ran_once_and_replays(noted, durable_stores, sid)


# --- an interrupt ---------------------------------------------------------------------------


def test_an_interrupt_stored_again_is_not_acted_on_again(
    durable_stores: StoreFactory, server: ScriptedModelServer
) -> None:
    held = Held()
    server.push(
        Step(tool_calls=[call("hold", n=1)]),
        Step(tool_calls=[call("hold", n=2)]),
        Step(text="two ends"),
        Step(text="three ends"),
    )
    try:
        with process(durable_stores, server, "a", tools=[held.tool]) as a:
            session = a.start_session()
            sid, root = session.session_id, session.root_conversation_id
            store = durable_stores.open()
            interrupt = Command(InterruptTask("k-1"), sender="front")
            first = session.submit("one")
            held.running(1)
            store.inbox.put(sid, interrupt)
            assert isinstance(task_end(store, sid, first).body, TurnAborted)
            held.gates[1].set()
            second = session.submit("two")
            held.running(2)
            store.inbox.put(sid, interrupt)  # stored again, as after a lost answer
            # A later command is taken after it: once queued, anything it did is done.
            third = TaskPlan("task-3", root, [InputText("three")])
            store.inbox.put(sid, Command(SubmitTask(third), sender="front"))
            first_of(store, sid, "task-3", TaskEnqueued)
            held.gates[2].set()
            assert isinstance(task_end(store, sid, second).body, TaskCompleted)
            assert isinstance(task_end(store, sid, "task-3").body, TaskCompleted)
            assert of_kind(store, sid, TurnAborted) == [first]
    finally:
        held.release()


def test_an_interrupt_whose_commit_answer_was_lost_interrupts_once(
    postgres: StoreFactory, server: ScriptedModelServer
) -> None:
    held = Held()
    server.push(
        Step(tool_calls=[call("hold", n=1)]),
        Step(tool_calls=[call("hold", n=2)]),
        Step(text="two ends"),
        Step(text="three ends"),
    )
    try:
        with (
            process(postgres, server, "worker", tools=[held.tool]) as worker,
            CuttingProxy() as proxy,
            front_end(proxy, postgres, server) as front,
        ):
            store = worker.store
            session = worker.start_session()
            sid, root = session.session_id, session.root_conversation_id
            followed = front.follow(sid)
            first = session.submit("one")
            held.running(1)
            proxy.arm(b"interrupt")
            thread, _ = in_thread(followed.interrupt)
            assert proxy.cut.wait(WAIT_SEC)
            assert isinstance(task_end(store, sid, first).body, TurnAborted)
            held.gates[1].set()
            second = session.submit("two")
            held.running(2)
            inbox_emptied(store, sid)
            proxy.let_in()  # the front end reconnects and looks whether its interrupt landed
            thread.join(WAIT_SEC)
            assert not thread.is_alive()
            third = TaskPlan("task-3", root, [InputText("three")])
            store.inbox.put(sid, Command(SubmitTask(third), sender="test"))
            first_of(store, sid, "task-3", TaskEnqueued)
            held.gates[2].set()
            assert isinstance(task_end(store, sid, second).body, TaskCompleted)
            assert isinstance(task_end(store, sid, "task-3").body, TaskCompleted)
            assert of_kind(store, sid, TurnAborted) == [first]
            assert store.inbox.commands(sid) == []
    finally:
        held.release()


# --- a destroy ------------------------------------------------------------------------------

OWNER = textwrap.dedent(
    """
    import sys
    from plait.actors._model import ModelSettings
    from plait.runtime import Runtime, RuntimeSettings

    url, base_url = sys.argv[1:3]
    settings = ModelSettings(base_url=base_url, api_key="k", model="m")
    runtime = Runtime(
        url, RuntimeSettings(model=settings, owner_id="doomed", expire_every_sec=None)
    )
    session = runtime.start_session()
    assert session.run("delegate", timeout=60).ok  # the root makes a helper, which answers
    root = session.root_conversation_id
    (helper,) = [c.id for c in session.conversations() if c.id != root]
    print(session.session_id, helper, flush=True)
    sys.stdin.read()  # owns it until killed
    """
)


def test_a_destroy_whose_owner_is_killed_before_it_is_recorded_is_done_by_the_next(
    tmp_path: Path, server: ScriptedModelServer
) -> None:
    """The owner takes the command and acts on it, and its record of the end waits (on the
    session's head row, which the test holds); killed there, it leaves the command for the
    next owner (docs/processes.md#each-command-takes-effect-once)."""
    stores = StoreFactory("postgres", tmp_path)
    server.push(*HELPER_SCRIPT)
    control = stores.open()
    assert isinstance(control, PostgresStore)
    name = f"doomed-{stores.schema}"  # its connections, as pg_stat_activity shows them
    url = f"{POSTGRES_URL}?schema={stores.schema}&application_name={name}"
    command = [sys.executable, "-c", OWNER, url, server.base_url]
    try:
        with subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        ) as owner:
            assert owner.stdout is not None
            sid, helper = owner.stdout.readline().split()
            with psycopg.connect(POSTGRES_URL) as held:  # a transaction holding the head row
                held.execute(
                    f'SELECT 1 FROM "{stores.schema}".streams WHERE stream = %s FOR UPDATE', (sid,)
                )
                control.inbox.put(sid, Command(DestroyConversation(helper), sender="front"))
                waiting_on_the_row(name)
                owner.kill()  # SIGKILL, its destroy told and its end not recorded
                assert owner.wait(WAIT_SEC) == -signal.SIGKILL
                # Its server processes would run the waiting append on once the row is free
                # (a server notices a dead client only when it answers): end them, as a
                # server that checks its clients does.
                held.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = %s",
                    (name,),
                )
        lease = control.leases.get(sid)
        assert lease is not None and lease.owner == "doomed"
        control.leases.expire(sid, lease.owner, lease.epoch)  # dead: no need to wait for it
        with process(stores, server, "next") as runtime:
            runtime.resume(sid)
            wait_for(control, sid, ConversationDestroyed, timeout=WAIT_SEC)
            inbox_emptied(control, sid)
        ends = [e for e in control.read(sid) if isinstance(e.body, ConversationDestroyed)]
        assert [e.conversation_id for e in ends] == [helper]
        assert control.verify(sid).ok
    finally:
        stores.close()


def waiting_on_the_row(name: str) -> None:
    """Return once a connection named ``name`` waits on a lock in an append (on the row the
    test holds)."""
    function = APPEND_SIGNATURE.partition("(")[0]
    query = (
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
        f"AND wait_event_type = 'Lock' AND query LIKE '%%{function}%%'"
    )
    with psycopg.connect(POSTGRES_URL, autocommit=True) as look:  # outside the held transaction
        until(
            lambda: (look.execute(query, (name,)).fetchone() or (0,))[0],
            f"{name}: no append waits on the row",
        )
