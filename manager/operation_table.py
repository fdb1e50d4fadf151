"""Every operation on a resource, declared once: the table the intake's plans,
``Operations.perform`` and startup reconciliation (``reconcile/rules.py``) all
read.

A :class:`Spec` is one (kind, action): the settled statuses it may start
from, the transient statuses its plan writes and its driver call expects, its
success and error statuses, the driver method, how messages name it, how a
reconciliation pass settles a row a crash left in its transient status, and
what carries it out. Operations that differ only in data are carried out by
one function (``operations.by_table``) from the spec and two small tables,
the method's arguments (``driver_args.ARGS``) and what a success writes
(``successes.DONE``); the few with more to them (a resize, access rules, a
backup's two phases, a manage, a revert, a promotion, a migration) name a
handler of their own (``handlers.OWN``).

Some rows are put in a transient status by what this manager does not carry
out itself (Manila's API for revert, promote; a backup's side status on its
share; a replica's manage): their specs have no handler, only the rule that
settles them.

To add an operation: an entry here (a new action in ``common/vocab.py`` if it
needs one), its plan in ``plans.py`` where users or stacks start it, and a
``driver_args.ARGS`` entry, and a ``successes.DONE`` one when its success
writes more than its status (or a handler, when it is more than one driver
call and one outcome).
doc/design.rst, "The operation table", shows one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from sharemgr.common import vocab

# How a reconciliation pass settles a transient status (doc/reconciliation.rst):
QUERY = "query"  # ask the driver's optional status method: ok or error
DELETE = "delete"  # retry the idempotent driver delete: deleted or error
MARK = "mark"  # the operation cannot be resumed: set the error status
RESEND = "resend"  # access rules: send the share's full rule set again


@dataclass(frozen=True)
class Rule:
    action: str
    error: str
    ok: str | None = None
    method: str | None = None  # QUERY: the driver's status method
    forced: str | None = None  # DELETE: the outcome of a forced delete


def query(method: str, error: str = vocab.ERROR, ok: str = vocab.AVAILABLE) -> Rule:
    return Rule(QUERY, error, ok, method)


def delete(error: str) -> Rule:
    return Rule(DELETE, error, vocab.DELETED, forced=vocab.DELETED)


def mark(error: str) -> Rule:
    return Rule(MARK, error)


# Settled statuses a delete may start from.
SHARE_DELETABLE = (
    vocab.AVAILABLE, vocab.ERROR, vocab.ERROR_DELETING, vocab.EXTENDING_ERROR,
    vocab.SHRINKING_ERROR, vocab.SHRINKING_POSSIBLE_DATA_LOSS_ERROR, vocab.MANAGE_ERROR,
    vocab.UNMANAGE_ERROR, vocab.REVERTING_ERROR, vocab.BACKUP_RESTORING_ERROR, vocab.INACTIVE,
)
SNAPSHOT_DELETABLE = (vocab.AVAILABLE, vocab.ERROR, vocab.ERROR_DELETING, vocab.MANAGE_ERROR,
                      vocab.UNMANAGE_ERROR)
SERVER_DELETABLE = (vocab.ACTIVE, vocab.ERROR, vocab.INACTIVE, vocab.MANAGE_ERROR,
                    vocab.UNMANAGE_ERROR)
SIMPLE_DELETABLE = (vocab.AVAILABLE, vocab.ERROR)



# Every status a row may be in: what ``Spec.methods`` is keyed by.
_EVERY_STATUS = frozenset().union(*vocab.VALID_STATUSES.values(), vocab.TRANSIENT_STATUSES,
                                  vocab.ERROR_STATUSES)


@dataclass(frozen=True)
class Spec:
    kind: str  # a kinds.KINDS name: the row whose status it moves
    action: str  # vocab.ACTION_* (a name of its own where no request carries it)
    verb: str  # messages say '<verb> of <what> <id>'
    transient: tuple[str, ...]  # what its plan writes; what its driver call expects
    settle: Rule | None  # how reconciliation settles a row a crash left in ``transient``
    starts_from: tuple[str, ...] = ()  # () for a create: its rows are new
    success: str | None = None  # the status its success writes (DELETED: the record goes)
    error: str | None = vocab.ERROR  # the status its failure writes
    error_also: tuple[tuple[str, str], ...] = ()  # more columns its failure sets
    method: str | None = None  # the driver method: leases, logs, the generic call
    carried: bool = True  # False: no request carries it out here, reconciliation settles it
    forcible: bool = False  # a forced delete (admin) ends in deleted whatever the driver says
    # The driver method of a row in a status its own (status, method) names,
    # not ``method`` (a share's create from a snapshot).
    method_when: tuple[tuple[str, str], ...] = ()
    flushes_access: bool = False  # rules queued meanwhile are sent after its success
    # The driver method of a row in each status (``method_when``'s, else
    # ``method``), made once: the lease's choice and the call read it as data.
    methods: Mapping[str, str | None] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        when = dict(self.method_when)
        object.__setattr__(self, "methods", MappingProxyType(
            {status: when.get(status, self.method) for status in _EVERY_STATUS}))

    @property
    def key(self) -> tuple[str, str]:
        return (self.kind, self.action)

    def method_of(self, status: str) -> str | None:
        """The driver method called about a row in ``status``."""
        return self.methods[status]

    def error_values(self) -> dict[str, str]:
        if self.error is None:
            raise ValueError(f"{self.kind} {self.action} has no error status")
        return {"status": self.error, **dict(self.error_also)}


def _create(kind: str, settle: Rule, method: str, success: str | None = vocab.AVAILABLE,
            verb: str = "create", error_also: tuple[tuple[str, str], ...] = ()) -> Spec:
    return Spec(kind, vocab.ACTION_CREATE, verb, (vocab.CREATING,), settle, (), success,
                error_also=error_also, method=method)


def _delete(kind: str, starts_from: tuple[str, ...], error: str, method: str,
            verb: str = "delete", transient: tuple[str, ...] = (vocab.DELETING,)) -> Spec:
    return Spec(kind, vocab.ACTION_DELETE, verb, transient, delete(error), starts_from,
                vocab.DELETED, error, method=method, forcible=True)


def _manage(kind: str, settle: Rule, method: str, success: str = vocab.AVAILABLE) -> Spec:
    """Manila's manage: a new record for an object the backend already has
    (manager/manage_ops.py)."""
    return Spec(kind, vocab.ACTION_MANAGE, "manage", (vocab.MANAGING,), settle, (), success,
                vocab.MANAGE_ERROR, method=method)


def _unmanage(kind: str, starts_from: tuple[str, ...], method: str) -> Spec:
    """Manila's unmanage: the record goes as a delete's does, the object stays."""
    return Spec(kind, vocab.ACTION_UNMANAGE, "unmanage", (vocab.UNMANAGING,),
                mark(vocab.UNMANAGE_ERROR), starts_from, vocab.DELETED, vocab.UNMANAGE_ERROR,
                method=method)


def _settled(kind: str, action: str, transient: str, rule: Rule) -> Spec:
    """A transient status set by what this manager does not carry out."""
    return Spec(kind, action, action, (transient,), rule, error=rule.error, carried=False)


_SI, _REP, _SNAP = vocab.SHARE_INSTANCE, vocab.REPLICA, vocab.SNAPSHOT_INSTANCE
_SRV, _GRP, _GSNAP, _BAK = (vocab.SHARE_SERVER, vocab.SHARE_GROUP, vocab.GROUP_SNAPSHOT,
                            vocab.BACKUP)

# Driver methods an operation calls besides its spec's ``method``; with the
# specs', the only place outside drivers/ that names one
# (tests/unit/test_vocabulary.py).
STATUS_METHOD: dict[str, str] = {  # each kind's optional status method
    _SI: "get_share_status", _REP: "get_replica_status", _SNAP: "get_snapshot_status",
    _GRP: "get_share_group_status", _GSNAP: "get_share_group_snapshot_status",
}
BACKUP_CONTINUE = {  # a backup's second phase, polled until done
    vocab.ACTION_CREATE: "create_backup_continue", vocab.ACTION_RESTORE: "restore_backup_continue",
}
MIGRATION_CONTINUE = "migration_continue"  # a driver-assisted migration's poll
_MANAGED = (  # a replica's manage statuses (a share instance's are carried out)
    ("manage", vocab.MANAGING, mark(vocab.MANAGE_ERROR)),
    ("unmanage", vocab.UNMANAGING, mark(vocab.UNMANAGE_ERROR)),
)
_SHARED = (  # a share instance's and a replica's: nothing but a mark settles them
    ("restore", vocab.RESTORING, mark(vocab.ERROR)),
    # A backup's side status on its share (the backup's own row is settled apart).
    ("backup", vocab.BACKUP_CREATING, mark(vocab.ERROR)),
    ("backup_restore", vocab.BACKUP_RESTORING, mark(vocab.ERROR)),
)

TABLE: tuple[Spec, ...] = (
    # Share servers come first: reconciliation settles in this order (rules.STAGES).
    _create(_SRV, mark(vocab.ERROR), "setup_server", vocab.ACTIVE, verb="setup"),
    _delete(_SRV, SERVER_DELETABLE, vocab.ERROR, "teardown_server", verb="teardown"),
    _manage(_SRV, mark(vocab.MANAGE_ERROR), "manage_server", vocab.ACTIVE),
    _unmanage(_SRV, SERVER_DELETABLE, "unmanage_server"),
    _settled(_SRV, "network_change", vocab.SERVER_NETWORK_CHANGE, mark(vocab.ERROR)),
    Spec(_SI, vocab.ACTION_CREATE, "create", (vocab.CREATING, vocab.CREATING_FROM_SNAPSHOT),
         query(STATUS_METHOD[_SI]), success=vocab.AVAILABLE, method="create_share",
         method_when=((vocab.CREATING_FROM_SNAPSHOT, "create_share_from_snapshot"),),
         flushes_access=True),
    Spec(_SI, vocab.ACTION_EXTEND, "extend", (vocab.EXTENDING,),
         query(STATUS_METHOD[_SI], vocab.EXTENDING_ERROR), (vocab.AVAILABLE,),
         vocab.AVAILABLE, vocab.EXTENDING_ERROR, method="extend_share"),
    Spec(_SI, vocab.ACTION_SHRINK, "shrink", (vocab.SHRINKING,),
         query(STATUS_METHOD[_SI], vocab.SHRINKING_ERROR), (vocab.AVAILABLE,),
         vocab.AVAILABLE, vocab.SHRINKING_ERROR, method="shrink_share"),
    _delete(_SI, SHARE_DELETABLE, vocab.ERROR_DELETING, "delete_share",
            transient=(vocab.DELETING, vocab.DEFERRED_DELETING)),
    # Access rules have states of their own (ACCESS_RULES below): the share's
    # status does not move.
    Spec(_SI, vocab.ACTION_UPDATE_ACCESS, "update_access", (), None, (vocab.AVAILABLE,),
         error=None, method="update_access"),
    *(_settled(_SI, action, status, rule) for action, status, rule in _SHARED),
    # The spec: a crash inside manage cannot be resumed without the call's
    # context (the export path, the driver options): manage_error, from
    # where the admin unmanages or manages again (specs/002).
    _manage(_SI, mark(vocab.MANAGE_ERROR), "manage_existing"),
    _unmanage(_SI, SHARE_DELETABLE, "unmanage"),
    # Revert to the latest snapshot (manager/revert_ops.py): the snapshot is
    # ``restoring`` meanwhile (its own spec below). A failure leaves the share
    # reverting_error (Manila's); a crash cannot be resumed without the call's
    # context: error, as the startup-reconciliation spec says (specs/002).
    Spec(_SI, vocab.ACTION_REVERT, "revert", (vocab.REVERTING,),
         mark(vocab.ERROR), (vocab.AVAILABLE,), vocab.AVAILABLE,
         vocab.REVERTING_ERROR, method="revert_to_snapshot"),
    _settled(_SI, vocab.ACTION_PROMOTE, vocab.REPLICATION_CHANGE, mark(vocab.ERROR)),
    # A migration (manager/migration_ops.py): the source instance is
    # ``migrating`` and the destination ``migrating_to`` from its start to
    # its end, under a busy task_state, so a reconciliation pass leaves both
    # to the migration's periodic task, which also settles one whose
    # request a crash cut short. Only a row whose task_state ended without
    # its status (an admin's reset) is the pass's: error. Complete and
    # cancel move the task_state only (their Steps name the status).
    Spec(_SI, vocab.ACTION_MIGRATION_START, "migration start",
         (vocab.MIGRATING, vocab.MIGRATING_TO), mark(vocab.ERROR), (vocab.AVAILABLE,),
         method="migration_start"),
    Spec(_SI, vocab.ACTION_MIGRATION_COMPLETE, "migration complete", (), None, error=None,
         method="migration_complete"),
    Spec(_SI, vocab.ACTION_MIGRATION_CANCEL, "migration cancel", (), None, error=None,
         method="migration_cancel"),
    # A replica is a share instance: only its create and delete differ.
    _create(_REP, query(STATUS_METHOD[_REP]), "create_replica",
            error_also=(("replica_state", vocab.REPLICA_ERROR),)),
    _delete(_REP, SHARE_DELETABLE, vocab.ERROR_DELETING, "delete_replica"),
    *(_settled(_REP, action, status, rule) for action, status, rule in _MANAGED + _SHARED),
    _settled(_REP, vocab.ACTION_REVERT, vocab.REVERTING, mark(vocab.ERROR)),
    # Promotion (manager/replica_ops.py). A crash inside it: error, as the
    # spec says (specs/002); replica_state error, as Manila leaves a failed
    # promotion.
    Spec(_REP, vocab.ACTION_PROMOTE, "promote", (vocab.REPLICATION_CHANGE,),
         mark(vocab.ERROR), (vocab.AVAILABLE,), vocab.AVAILABLE, vocab.AVAILABLE,
         (("replica_state", vocab.REPLICA_ERROR),), method="promote_replica"),
    # A replica's state asked now (``sharectl replica resync``); its status
    # does not move.
    Spec(_REP, vocab.ACTION_RESYNC, "resync", (), None, (vocab.AVAILABLE,), error=None,
         method="update_replica_state"),
    _create(_SNAP, query(STATUS_METHOD[_SNAP]), "create_snapshot"),
    _delete(_SNAP, SNAPSHOT_DELETABLE, vocab.ERROR_DELETING, "delete_snapshot"),
    _manage(_SNAP, mark(vocab.MANAGE_ERROR), "manage_existing_snapshot"),
    _unmanage(_SNAP, SNAPSHOT_DELETABLE, "unmanage_snapshot"),
    # The snapshot a share is reverted to; a crash: error (specs/002).
    _settled(_SNAP, "restore", vocab.RESTORING, mark(vocab.ERROR)),
    _create(_GRP, query(STATUS_METHOD[_GRP]), "create_share_group"),
    _delete(_GRP, SIMPLE_DELETABLE, vocab.ERROR, "delete_share_group"),
    _create(_GSNAP, query(STATUS_METHOD[_GSNAP]), "create_share_group_snapshot"),
    _delete(_GSNAP, SIMPLE_DELETABLE, vocab.ERROR, "delete_share_group_snapshot"),
    # Backups are two-phase: once the driver call has started, the periodic
    # *_continue tasks own them (reconcile/scan.py leaves them alone); one whose
    # call never happened can only be failed (creating) or returned to
    # available (restoring: the backup itself is intact).
    _create(_BAK, mark(vocab.ERROR), "create_backup", success=None),
    Spec(_BAK, vocab.ACTION_RESTORE, "restore", (vocab.RESTORING,), mark(vocab.AVAILABLE),
         (vocab.AVAILABLE,), error=vocab.AVAILABLE, method="restore_backup"),
    _delete(_BAK, SIMPLE_DELETABLE, vocab.ERROR, "delete_backup"),
)

SPECS: dict[tuple[str, str], Spec] = {s.key: s for s in TABLE}


def spec(kind: str, action: str) -> Spec:
    return SPECS[(kind, action)]


# Access rules a crash left on their way to the backend: ``resend`` calls
# update_access again with the share's full rule set (drivers must make it
# idempotent); each rule takes its outcome (``ok``), or ``error`` when the
# call fails or the backend refuses the rule. Run after the stages, once the
# shares are settled.
ACCESS_RULES: dict[str, Rule] = {
    state: Rule(RESEND, vocab.ACCESS_ERROR, ok, "update_access")
    for state, ok in ((vocab.ACCESS_QUEUED_TO_APPLY, vocab.ACCESS_ACTIVE),
                      (vocab.ACCESS_APPLYING, vocab.ACCESS_ACTIVE),
                      (vocab.ACCESS_QUEUED_TO_DENY, vocab.ACCESS_DELETED),
                      (vocab.ACCESS_DENYING, vocab.ACCESS_DELETED))}
