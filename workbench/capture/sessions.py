"""Which conversation and which agent a captured request belongs to (docs/capture.md,
"Sessions and sub-agents"). Messages are compared by salted digests, never kept as text.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from workbench.capture.blocks import LocalIds, Salt
from workbench.capture.protocols import COMPLETIONS, RequestFacts


@dataclass(slots=True, eq=False)
class Turn:
    """One captured request of an agent (times in monotonic seconds)."""

    sent: float
    think_time: float
    model: str
    stream: bool
    input_types: list[str]
    ended: float | None = None
    prompt_tokens: int = 0
    output_tokens: int = 0
    output_types: list[str] = field(default_factory=list)
    stop: str = ""
    #: a Responses request naming an answer the capture did not see: its prompt's prefix
    #: is unknown (docs/capture.md, "The Responses API")
    prefix_unknown: bool = False
    hash_ids: list[int] | None = None  # the file's block ids; set last: the turn is done

    @property
    def done(self) -> bool:
        return self.hash_ids is not None and self.ended is not None


@dataclass(slots=True, eq=False)
class Agent:
    """A chain of requests each extending the last; ``parent`` is None for a root."""

    conversation: Conversation
    parent: Agent | None
    depth: int
    turns: list[Turn] = field(default_factory=list)
    children: list[Agent] = field(default_factory=list)
    last_end: float | None = None  # the end of its last response
    inflight: int = 0
    wait_from: float = 0.0
    last_stop: str = ""  # its last response's stop: "tool_use" = it waits for a tool

    @property
    def waiting(self) -> bool:
        return self.inflight == 0 and self.last_end is not None


@dataclass(slots=True, eq=False)
class Conversation:
    """One root agent and its sub-agents: one file of the capture."""

    number: int
    group: str
    root: Agent = field(init=False)
    agents: list[Agent] = field(default_factory=list)
    ids: LocalIds = field(default_factory=LocalIds)
    #: its requests relayed and not recorded (docs/capture.md, "What is captured")
    not_recorded: int = 0


class Sessions:
    """The assignment state of one capture; ``key`` salts the message digests."""

    def __init__(self, key: bytes) -> None:
        self._digest = Salt(key).digest
        self.conversations: list[Conversation] = []
        self._numbers = itertools.count(1)
        self._alias: dict[str, str] = {}  # a session value → its group
        self._groups: dict[str, list[Agent]] = {}
        # (group, chain digest of an agent's last request's messages) → that agent
        self._index: dict[tuple[str, bytes], Agent] = {}
        self._last_key: dict[int, tuple[str, bytes]] = {}  # id(agent) → its index key
        self._turns: dict[int, tuple[Agent, Turn]] = {}
        # completions: (group, prompt length) → {digest of that prefix: agent}
        self._prompts: dict[str, dict[int, dict[bytes, Agent]]] = {}
        self._prompt_key: dict[int, tuple[int, bytes]] = {}  # id(agent) → its last prompt
        self._session_agent: dict[str, Agent] = {}  # a session value → its latest agent

    def number_after(self, n: int) -> None:
        """Number new conversations from ``n + 1`` on (files already in the directory)."""
        self._numbers = itertools.count(n + 1)

    def _group(self, session: str | None, parent: str | None) -> tuple[str, bool]:
        """The request's group, and whether it was grouped by a header."""
        if parent:
            group = self._alias.setdefault(parent, parent)
            if session:
                self._alias.setdefault(session, group)
            return group, True
        if session:
            return self._alias.setdefault(session, session), True
        return "", False

    def chain(self, facts: RequestFacts) -> list[bytes]:
        """The salted chain digests of a request's preamble and messages: entry *k* stands
        for everything up to message *k* (a Responses request naming an earlier answer:
        that answer's chain, then its own items)."""
        if facts.prior_chain:
            return self.extend(facts.prior_chain, facts.messages)
        return self.extend([self._digest(facts.preamble)], facts.messages)

    def extend(self, chain: list[bytes], messages: list[bytes]) -> list[bytes]:
        """``chain`` followed by ``messages``' digests (a new list)."""
        out = list(chain)
        for m in messages:
            out.append(self._digest(m, out[-1]))
        return out

    def arrive(self, xid: int, sent: float, facts: RequestFacts, session: str | None = None,
               parent: str | None = None, chain: list[bytes] | None = None) -> Turn:
        """Assign a request that arrived at ``sent``; returns its (not yet done) turn.
        ``chain``: ``self.chain(facts)`` when the caller computed it already."""
        group, by_header = self._group(session, parent)
        if facts.api == COMPLETIONS:
            agent, new_from = self._continue_prompt(group, facts)
            chain_key = None
        else:
            chain = chain if chain is not None else self.chain(facts)
            prior = len(chain) - 1 - len(facts.messages)  # rebuilt items before them
            agent, new_from = None, 0
            for k in range(len(chain) - 1, 0, -1):
                agent = self._index.get((group, chain[k]))
                if agent is not None:
                    new_from = max(0, k - prior)
                    break
            chain_key = (group, chain[-1])
        if agent is None:
            named = self._session_agent.get(parent) if parent else None
            agent = self._new_agent(group, by_header, parent is not None, sent, named)
            input_types = ["text"]
        else:
            fresh = facts.tool_result[new_from:]
            input_types = ["tool_result"] if any(fresh) else ["text"]
        think = sent - agent.last_end if agent.last_end is not None else 0.0
        turn = Turn(sent, max(0.0, think), facts.model, facts.stream, input_types)
        if session:
            self._session_agent[session] = agent
        agent.turns.append(turn)
        agent.inflight += 1
        self._turns[xid] = (agent, turn)
        if chain_key is not None:
            old = self._last_key.get(id(agent))
            if old is not None and self._index.get(old) is agent:
                del self._index[old]
            self._index[chain_key] = agent
            self._last_key[id(agent)] = chain_key
        else:
            self._index_prompt(group, facts, agent)
        return turn

    def _continue_prompt(self, group: str, facts: RequestFacts) -> tuple[Agent | None, int]:
        """Completions: the agent whose last prompt is the longest prefix of this one."""
        raw = _prompt_bytes(facts)
        by_length = self._prompts.get(group, {})
        for length in sorted(by_length, reverse=True):
            if length <= len(raw):
                agent = by_length[length].get(self._digest(raw[:length]))
                if agent is not None:
                    return agent, 1
        return None, 0

    def _index_prompt(self, group: str, facts: RequestFacts, agent: Agent) -> None:
        raw = _prompt_bytes(facts)
        by_length = self._prompts.setdefault(group, {})
        old = self._prompt_key.get(id(agent))
        if old is not None:  # the agent's previous prompt no longer continues it
            by_length.get(old[0], {}).pop(old[1], None)
        digest = self._digest(raw)
        by_length.setdefault(len(raw), {})[digest] = agent
        self._prompt_key[id(agent)] = (len(raw), digest)

    def _new_agent(self, group: str, by_header: bool, named_parent: bool, sent: float,
                   named: Agent | None = None) -> Agent:
        members = self._groups.setdefault(group, [])
        live = [a for a in members if a.turns]
        waiting = [a for a in live if a.waiting and (a.last_end or 0.0) <= sent]
        asked = [a for a in waiting if a.last_stop == "tool_use"]
        parent: Agent | None = named  # the agent of the session the parent header names
        if parent is None and (by_header or named_parent):
            pool = asked or waiting
            if pool:
                parent = min(pool, key=_parent_rank)
            elif live:
                parent = live[0].conversation.root
        elif parent is None and asked:
            parent = min(asked, key=_parent_rank)
        if parent is None:
            conv = Conversation(next(self._numbers), group)
            agent = Agent(conv, None, 0)
            conv.root = agent
            self.conversations.append(conv)
        else:
            conv = parent.conversation
            agent = Agent(conv, parent, parent.depth + 1)
            parent.children.append(agent)
        conv.agents.append(agent)
        members.append(agent)
        return agent

    def finish(self, xid: int, ended: float, stop: str = "") -> tuple[Agent, Turn] | None:
        """The request's response ended at ``ended`` with ``stop``."""
        got = self._turns.pop(xid, None)
        if got is None:
            return None
        agent, turn = got
        turn.ended = ended
        agent.inflight -= 1
        if agent.last_end is None or ended >= agent.last_end:
            agent.last_end = ended
            agent.wait_from = ended
            agent.last_stop = stop
        return agent, turn

    def abandon(self, xid: int) -> Conversation | None:
        """The request failed: it is not recorded; an agent it would have started is
        forgotten. Returns its conversation (None: it was the conversation's first)."""
        got = self._turns.pop(xid, None)
        if got is None:
            return None
        agent, turn = got
        agent.inflight -= 1
        agent.turns.remove(turn)
        conv = agent.conversation
        if agent.turns or agent.inflight:
            return conv
        if agent in conv.agents:
            conv.agents.remove(agent)
        if agent.parent is not None and agent in agent.parent.children:
            agent.parent.children.remove(agent)
        for members in self._groups.values():
            if agent in members:
                members.remove(agent)
        for key in [k for k, a in self._index.items() if a is agent]:
            del self._index[key]
        for by_length in self._prompts.values():
            for table in by_length.values():
                for digest in [d for d, a in table.items() if a is agent]:
                    del table[digest]
        if agent.parent is None and not conv.agents and conv in self.conversations:
            self.conversations.remove(conv)
        return conv if conv in self.conversations else None


def _parent_rank(agent: Agent) -> tuple[int, float]:
    """The likeliest parent first: closest to the root, then the latest to start waiting."""
    return agent.depth, -agent.wait_from


def _prompt_bytes(facts: RequestFacts) -> bytes:
    """A completions prompt as bytes whose prefixes are its prompt's prefixes."""
    from array import array

    prompt = facts.body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], list | str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt.encode("utf-8", "surrogatepass")
    if isinstance(prompt, list) and all(type(t) is int and 0 <= t < 2**63 for t in prompt):
        return array("q", prompt).tobytes()
    return facts.messages[0] if facts.messages else b""
