# A lock handed from one local holder to the next waiter in one command
# (worker/transfer.c), release by release through MONITOR:
#
# - a transaction-scoped holder whose hold tracking vouches for commits:
#   its release and the grant to the next waiter are one transfer script
#   (nothing freed, no unlock message, no acquire), the waiter is granted,
#   commits, and its commit needs no verify round trip in at least one of
#   three runs (the transfer's mark made its hold tracked);
# - the source hold gone unannounced before the transfer ran (SWAPDB moves
#   every key away and Redis sends no invalidation for it; the holder's
#   commit is vouched for, as doc/leases.md says of SWAPDB): the waiter
#   was granted, its transaction runs, and its COMMIT fails with 40001,
#   with rlock.verify_at_commit = lease too (whose commit would otherwise
#   trust the grant's lease), also when the worker has the transfer's
#   answer before the waiter's backend goes on (stopped meanwhile: the
#   loss must not be taken for one of holds the session had before); the
#   lock is left to nobody, and the line goes on;
# - waiters that may not be handed a lock unseen go the usual way, a
#   release and then an acquire: a session-scoped waiter (no commit checks
#   it), a waiter whose rlock.verify_at_commit is off, a waiter asking for
#   a fencing token (only Redis counts it);
# - the waiter's commit reaching the worker while the transfer waits in
#   Redis (CLIENT PAUSE WRITE): the worker answers the check once the
#   transfer is in, without a verify round trip (one of three at least);
# - a yield mark set for a minute by someone else does not keep a waiter
#   off a free lock (rlock's own last 1 ms);
# - a chain: four sessions in turn on one key, every release a transfer,
#   the counter exact.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::Redis;
use RlockTest::TLS;
use RlockTest::Transfer qw(plain_shas session line_up scripts_on chain);

plan skip_all => 'the hand-off does not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
# a window that a psql round trip between the lock and the COMMIT does
# not outlast; no watchdog renewal during the test (it untracks holds)
my $node = RlockTest::node('transfer', $redis,
	conf => [ "rlock.verify_window = '1s'", "rlock.watchdog_timeout = '10min'",
			  'log_min_messages = warning' ]);
ok(RlockTest::wait_for_redis($node, 15), 'rlock is connected');

my %sha = plain_shas(qw(acquire release transfer verify));

# $holder holds $key in a transaction; $waiter asks for it with $ask and
# queues
sub queue_behind
{
	my ($key, $holder, $waiter, $ask) = @_;
	line_up($node, $key, $ask, $holder, $waiter);
}

my ($a, $b, $c, $d) = map { session($node) } 1 .. 4;

#---- a transfer ----

my $key = 'xfer:one';
my $ran;
my $unverified = 0;
for my $try (1 .. 3)
{
	queue_behind($key, $a, $b, "SELECT rlock_try('$key', '30 s')");
	my $mon = $redis->monitor;
	$a->query_safe('COMMIT');
	my ($out, $err) = RlockTest::collect($b);
	is($out, 't', "[$try] the waiter is granted") or diag($err);
	$b->query_safe('SELECT pg_sleep(0.05)');
	$b->query_safe('COMMIT');
	is($b->{stderr}, '', "[$try] and commits");
	$ran = scripts_on(\%sha, $key, $mon->drain(0.3));
	like($ran, qr/^transfer( verify)? release publish$/,
		"[$try] the release and the grant are one transfer; the waiter's own release frees the lock");
	$unverified++ if $ran !~ /verify/;
	$b->{stderr} = '';
}
cmp_ok($unverified, '>=', 1,
	'a commit after a transfer needs no verify round trip (one of three at least)');
is($redis->cmd('EXISTS', $key), 0, 'the lock is free at the end');

#---- a commit that reaches the worker before its transfer's answer ----

# The transfer is held in Redis (CLIENT PAUSE WRITE) while the waiter,
# granted, commits: the commit's check waits in the worker for the
# transfer's answer and is then answered there, without a verify round
# trip, once tracking vouches for the hold (its mark read), in one of
# three runs at least.
$key = 'xfer:early';
$unverified = 0;
for my $try (1 .. 3)
{
	queue_behind($key, $a, $b, "SELECT rlock_try('$key', '30 s')");
	my $mon = $redis->monitor;
	$redis->cmd('CLIENT', 'PAUSE', 300, 'WRITE');
	$a->query_safe('COMMIT');
	my ($out, $err) = RlockTest::collect($b);
	is($out, 't', "[early $try] the waiter is granted while the transfer waits in Redis")
	  or diag($err);
	$b->query('COMMIT');
	is($b->{stderr}, '', "[early $try] and commits once it is answered");
	$b->{stderr} = '';
	$ran = scripts_on(\%sha, $key, $mon->drain(0.3));
	like($ran, qr/^transfer( verify)? release publish$/, "[early $try] one transfer ($ran)");
	$unverified++ if $ran !~ /verify/;
}
cmp_ok($unverified, '>=', 1,
	'a commit that waited for its transfer is answered by the worker without a verify (one of three at least)');

#---- the source hold gone, unannounced ----

my ($mon, $out, $err);
my $b_pid = $b->query_safe('SELECT pg_backend_pid()');
END { kill 'CONT', $b_pid if $b_pid }
sub lost_count { return $node->safe_psql('postgres', 'SELECT lost FROM rlock_stats') }
# off: turned off by the waiter after its grant (a superuser may)
for my $case ([ 'on', 0 ], [ 'lease', 0 ], [ 'on', 1 ], [ 'lease', 1 ], [ 'off', 1 ])
{
	my ($how, $late) = @$case;
	# late: the waiter's backend is stopped until the worker has the
	# transfer's answer, so that the loss is there before the session
	# counts its grant
	my $mode = $how . ($late ? ', answered late' : '');
	$key = "xfer:gone:$how:$late";
	queue_behind($key, $a, $b,
		'SET LOCAL rlock.verify_at_commit = ' . ($how eq 'off' ? 'on' : $how)
		  . "; SELECT rlock_try('$key', '30 s')");
	$mon = $redis->monitor;
	my $lost = lost_count();
	kill 'STOP', $b_pid if $late;
	$redis->cmd('SWAPDB', 0, 1);
	$a->query_safe('COMMIT');
	is($a->{stderr}, '', "[$mode] the holder commits: Redis announced nothing");
	if ($late)
	{
		ok(RlockTest::wait_until(sub { lost_count() > $lost }, 10),
			"[$mode] the transfer found the holder gone before the waiter went on");
		kill 'CONT', $b_pid;
	}
	($out, $err) = RlockTest::collect($b);
	is($out, 't', "[$mode] the waiter was granted at once");
	$b->query_safe('SET LOCAL rlock.verify_at_commit = off') if $how eq 'off';
	$b->query_safe("SELECT 1");
	$b->query('COMMIT');
	my $commit_err = $b->{stderr};
	$b->{stderr} = '';
	my @lines = $mon->drain(0.3);
	$ran = scripts_on(\%sha, $key, @lines);
	like($commit_err, qr/40001.*lock "\Q$key\E" was lost/s,
		"[$mode] its commit fails with 40001: the transfer found the holder gone")
	  or diag("scripts run: $ran\n" . join("\n", @lines));
	like($ran, qr/^transfer\b/, "[$mode] it was a transfer");
	unlike($ran, qr/acquire/, "[$mode] and nobody was granted the lock in its place");
	is($redis->cmd('EXISTS', $key), 0, "[$mode] nothing was written where the lock was");
	$redis->cmd('SWAPDB', 0, 1);
	is($redis->cmd('HEXISTS', $key, 'mode'), 1, "[$mode] the moved lock is back");
	$redis->cmd('DEL', $key);
}
# the line goes on: the next holder and waiter are served as before
queue_behind($key, $a, $b, "SELECT rlock_try('$key', '30 s')");
$a->query_safe('COMMIT');
($out, $err) = RlockTest::collect($b);
is($out, 't', 'the key serves the next pair');
$b->query_safe('COMMIT');
is($b->{stderr}, '', 'which commits');

#---- a yield mark nobody should honour ----

# rlock's own yield marks last 1 ms; a waiter's try ignores one set for
# longer (by anyone who may write the key), so that it cannot keep
# waiters off a free lock: the session-scoped waiter (no transfer) is
# handed the free lock although rlock_yield:{key} is set for a minute.
$key = 'xfer:yield';
queue_behind($key, $a, $b, "SELECT rlock_session_try('$key', '3 s')");
$redis->cmd('SET', "rlock_yield:{$key}", '1', 'PX', 60000);
$a->query_safe('COMMIT');
($out, $err) = RlockTest::collect($b);
is($out, 't', 'a yield mark of a minute does not keep the waiter off the free lock')
  or diag($err);
$b->query_safe("SELECT rlock_session_release('$key')");
$redis->cmd('DEL', "rlock_yield:{$key}");

#---- waiters that go the usual way ----

for my $case (
	[ 'a session-scoped waiter', "SELECT rlock_session_try('xfer:session', '30 s')",
	  'xfer:session', "SELECT rlock_session_release('xfer:session')" ],
	[ 'a waiter whose check before commit is off',
	  "SET LOCAL rlock.verify_at_commit = off; SELECT rlock_try('xfer:off', '30 s')",
	  'xfer:off', 'COMMIT' ],
	[ 'a waiter asking for a fencing token',
	  "SELECT rlock_try_token('xfer:token', '30 s') > 0", 'xfer:token', 'COMMIT' ])
{
	my ($what, $ask, $k, $end) = @$case;
	queue_behind($k, $a, $b, $ask);
	$mon = $redis->monitor;
	$a->query_safe('COMMIT');
	($out, $err) = RlockTest::collect($b);
	is($out, 't', "$what is granted") or diag($err);
	$b->query_safe($end);
	$ran = scripts_on(\%sha, $k, $mon->drain(0.3));
	like($ran, qr/^release publish acquire\b/,
		"$what: a release, then its try ($ran)");
	unlike($ran, qr/transfer/, "$what: no transfer");
	$b->{stderr} = '';
}

#---- a chain ----

$key = 'xfer:chain';
$node->safe_psql('postgres', 'CREATE TABLE chain (n int); INSERT INTO chain VALUES (0)');
line_up($node, $key, undef, $a, $b, $c, $d);
$mon = $redis->monitor;
is(chain($node, $key, 12, $a, $b, $c, $d), '', 'twelve sections commit');
$ran = scripts_on(\%sha, $key, $mon->drain(0.3));
my $transfers = () = $ran =~ /transfer/g;
is($transfers, 11, 'eleven hand-offs in a chain, each one transfer');
unlike($ran, qr/acquire/, 'and no try in between');
like($ran, qr/^(transfer (verify )?){11}release publish$/,
	'the last release frees the lock');
is($node->safe_psql('postgres', 'SELECT n FROM chain'), 12,
	'twelve sections, the counter exact');

#---- a giver that holds the key shared too ----

# A transfer writes the key anew for the taker: a session holding the key
# shared as well as exclusively (its re-entry tracks the key again, so
# that its exclusive hold is vouched for) hands its exclusive hold back
# with a release, which leaves its shared hold in place, and the waiter
# gets the lock only when the shared hold goes.
$key = 'xfer:both';
$a->query_safe('BEGIN');
$a->query_safe("SELECT rlock_try('$key'), rlock_try_shared('$key'), rlock_try('$key')");
$b->query_safe('BEGIN');
RlockTest::send_query($b, "SELECT rlock_try('$key', '30 s');");
ok(RlockTest::wait_until(sub { RlockTest::Transfer::waiting($node, $key) == 1 }, 10), 'a waiter queues');
$mon = $redis->monitor;
$a->query_safe("SELECT rlock_release('$key'), rlock_release('$key')");
is($node->safe_psql('postgres', "SELECT rlock_held_shared('$key')"), '0',
	'(another session holds nothing)');
is($a->query_safe("SELECT rlock_held('$key'), rlock_held_shared('$key')"), '0|1',
	'the giver keeps its shared hold');
$ran = scripts_on(\%sha, $key, $mon->drain(0.3));
unlike($ran, qr/transfer/, "no transfer ($ran)");
is(scalar(grep { $_ ne 'mode' } @{ $redis->cmd('HKEYS', $key) }), 1,
	'its reader field is still in Redis');
is(RlockTest::Transfer::waiting($node, $key), 1, 'the waiter waits on');
$a->query_safe('COMMIT');
($out, $err) = RlockTest::collect($b);
is($out, 't', 'and gets the lock when the shared hold goes') or diag($err);
$b->query_safe('COMMIT');

$_->quit for ($a, $b, $c, $d);
$node->stop;
done_testing();
