# The check before commit without a round trip: with rlock.verify_at_commit
# = on (the default), Redis tracks the key of every lock the worker was
# granted (CLIENT TRACKING ... REDIRECT to the subscriber), announces any
# change of it, and each granting acquire publishes a mark that places the
# announcements.  A commit whose locks nobody
# changed does without the verify script; a lock deleted, expired,
# flushed or force-released before COMMIT still fails it with 40001,
# after a verify round trip that the announcement asked for.  Where
# tracking is off, refused or not fresh, commits ask as before.

use strict;
use warnings;

use Digest::SHA qw(sha1_hex);
use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;

my $redis = RlockTest::Redis->start;
# a window long enough that a psql round trip between the lock and the
# COMMIT does not make the check fall back (the default is 1 ms); the
# watchdog's batch renews every lock it finds, which untracks it (its
# commit asks), so its period is made longer than this test
my $node = RlockTest::node('tracking', $redis,
	conf => [ "rlock.verify_window = '1s'", "rlock.watchdog_timeout = '10min'" ]);
ok(RlockTest::wait_for_redis($node, 15), 'rlock is connected');

my $verify_sha = sha1_hex(RlockTest::script_text(
		($ENV{TESTDIR} // '.') . '/src/kinds/plain/verify.lua'));

sub command_flags
{
	my ($line) = grep { / name=rlock_command / } split /\n/,
	  $redis->cmd('CLIENT', 'LIST');
	return defined $line && $line =~ / flags=(\S+)/ ? $1 : '';
}

# CLIENT LIST's redir field of the command connection: the client id its
# invalidations go to
sub command_redirect
{
	my ($line) = grep { / name=rlock_command / } split /\n/,
	  $redis->cmd('CLIENT', 'LIST');
	return defined $line && $line =~ / redir=(-?\d+)/ ? $1 : -1;
}

sub tracking_armed
{
	return RlockTest::wait_until(sub { command_flags() =~ /t/ }, 15);
}

ok(tracking_armed(), 'the command connection has tracking on');
my $sub_id = $redis->client_id('rlock_subscriber');
ok($sub_id, 'the subscriber connection is there');
is(command_redirect(), $sub_id, 'and the invalidations go to it');

my $mon = $redis->monitor;
my $marks = 0;
my $tracking_asked = 0;	# CLIENT TRACKING commands seen by verifies_since

# Verify scripts Redis ran since the last call: the MONITOR stream is read
# up to a mark sent after them.
sub verifies_since
{
	my $mark = 'mark-' . ++$marks;
	$redis->cmd('ECHO', $mark);
	my $n = 0;
	while (1)
	{
		my $line = $mon->read_reply(10);
		die 'MONITOR stream ended' unless defined $line;
		last if $line =~ /"ECHO" "\Q$mark\E"/;
		$n++ if $line =~ /"EVALSHA" "$verify_sha"/;
		$tracking_asked++ if $line =~ /"CLIENT" "TRACKING"/i;
	}
	return $n;
}

my $s = $node->background_psql('postgres', on_error_stop => 0);

# Does one of three runs of $txn (given the try's number) commit without a
# verify?  One run may ask for the race told above twenty commits below.
sub vouched_once
{
	my ($txn) = @_;
	for my $try (1 .. 3)
	{
		verifies_since();
		$txn->($try);
		return 1 if verifies_since() == 0;
	}
	return 0;
}

# Transactions with one fresh lock each: no verify at all.
verifies_since();
for my $i (1 .. 20)
{
	$s->query_safe('BEGIN');
	$s->query_safe("SELECT rlock_try('tr:plain:$i')");
	$s->query_safe('COMMIT');
}
# Redis writes a grant's reply and its mark on two sockets, the reply
# maybe first: on a loaded machine a session can reach its COMMIT before
# the worker read the mark, and that commit asks.  Vouching that did not
# work would ask at all twenty.
cmp_ok(verifies_since(), '<=', 2,
	'twenty commits of untouched locks: no more than two sent a verify');
is($s->{stderr}, '', 'and all committed');

# A change another client makes before COMMIT fails it, by each way a lock
# can go, 1, 5 and 100 ms before.
my %change = (
	'DEL' => sub { $redis->cmd('DEL', $_[0]) },
	'forceUnlock' => sub {
		# what Redisson's forceUnlock runs: DEL and the unlock message
		$redis->cmd('DEL', $_[0]);
		$redis->cmd('PUBLISH', "redisson_lock__channel:{$_[0]}", '0');
	},
	'expiry' => sub {
		my ($key) = @_;
		$redis->cmd('PEXPIRE', $key, 1);
		RlockTest::wait_until(sub { $redis->cmd('EXISTS', $key) == 0 }, 5);
	},
	'owner field removed' => sub {
		my ($owner) = @{ $redis->owners($_[0]) };
		$redis->cmd('HDEL', $_[0], $owner);
	},
	'FLUSHALL' => sub { $redis->cmd('FLUSHALL') },);
for my $how (sort keys %change)
{
	for my $ms (1, 5, 100)
	{
		my $key = "tr:$how:$ms";
		$key =~ s/\s+/_/g;
		$s->query_safe('BEGIN');
		$s->query_safe("SELECT rlock_try('$key')");
		verifies_since();
		$change{$how}->($key);
		$s->query_safe("SELECT pg_sleep($ms / 1000.0)");
		$s->query('COMMIT');
		like($s->{stderr}, qr/lock "\Q$key\E" was lost/,
			"$how $ms ms before COMMIT fails the commit");
		$s->{stderr} = '';
		is(verifies_since(), 1, "$how $ms ms before COMMIT: the commit asked Redis");
	}
}
$s->{stderr} = '';
ok(tracking_armed(), 'tracking is on again after FLUSHALL');

# The verify after an announcement tracks nothing: the next transaction's
# fresh lock is vouched again.
ok(vouched_once(sub {
			my $try = shift;
			$s->query_safe('BEGIN');
			$s->query_safe("SELECT rlock_try('tr:after:$try')");
			$s->query_safe('COMMIT');
		}),
	'a fresh lock after all that commits without a verify');

# A forced release from SQL of the same instance goes on the worker's own
# connection; the worker marks the hold lost (and Redis announces it).
$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('tr:forced')");
$node->safe_psql('postgres', "SELECT rlock_force_release('tr:forced')");
$s->query('COMMIT');
like($s->{stderr}, qr/lock "tr:forced" was lost/,
	'a forced release from SQL fails the commit');
$s->{stderr} = '';

# A session-scoped lock taken earlier is not the commit's business; a
# transaction-scoped lock on a key the session holds too is confirmed by
# the acquire that counts it up, and vouched.
$s->query_safe("SELECT rlock_session_try('tr:session')");
ok(vouched_once(sub {
			$s->query_safe('BEGIN');
			$s->query_safe("SELECT rlock_try('tr:session')");
			$s->query_safe('COMMIT');
		}),
	'a reentrant transaction-scoped lock is vouched');
$s->query_safe("SELECT rlock_session_release('tr:session')");

# Fallbacks: each asks Redis at commit.
# - not fresh: a worker that heard nothing from Redis for longer than the
#   window
$s->query_safe("SET rlock.verify_window = '20ms'");
$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('tr:idle')");
verifies_since();
$s->query_safe('SELECT pg_sleep(0.1)');
$s->query_safe('COMMIT');
is(verifies_since(), 1, 'an idle worker: the commit asks Redis');
$s->query_safe("SET rlock.verify_window = 0");
$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('tr:window0')");
verifies_since();
$s->query_safe('COMMIT');
is(verifies_since(), 1, 'rlock.verify_window = 0: every commit asks');
$s->query_safe("RESET rlock.verify_window");

# - the subscriber lost: tracking is disarmed, then armed again with the
#   new subscriber
$redis->cmd('CLIENT', 'KILL', 'ID', $sub_id);
ok( RlockTest::wait_until(
		sub {
			my $id = $redis->client_id('rlock_subscriber');
			defined $id && $id != $sub_id;
		}),
	'the subscriber connection is made again');
ok( RlockTest::wait_until(
		sub {
			command_flags() =~ /t/
			  && command_redirect() == ($redis->client_id('rlock_subscriber') // 0);
		}, 15),
	'and tracking redirects to it');
verifies_since();
$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('tr:resubscribed')");
$redis->cmd('DEL', 'tr:resubscribed');
# 100 ms before COMMIT, as above: with a window of 1 s, an announcement
# the worker has not read yet when the commit looks is missed by design
$s->query_safe('SELECT pg_sleep(0.1)');
$s->query('COMMIT');
like($s->{stderr}, qr/lock "tr:resubscribed" was lost/,
	'a deletion after the new subscriber came is caught');
$s->{stderr} = '';

# - the command connection lost: what it tracked is forgotten
my $cmd_id = $redis->client_id('rlock_command');
$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('tr:reconnect')");
$redis->cmd('CLIENT', 'KILL', 'ID', $cmd_id);
ok( RlockTest::wait_until(
		sub {
			my $id = $redis->client_id('rlock_command');
			defined $id && $id != $cmd_id && command_flags() =~ /t/;
		}, 15),
	'the command connection is made again, with tracking');
verifies_since();
$s->query('COMMIT');
is(verifies_since(), 1, 'a lock confirmed on the lost connection is asked about');
$s->{stderr} = '';

# - rlock.client_tracking = off
$node->safe_psql('postgres',
	"ALTER SYSTEM SET rlock.client_tracking = off; SELECT pg_reload_conf()");
ok(RlockTest::wait_until(sub { command_flags() !~ /t/ }, 15),
	'rlock.client_tracking = off turns tracking off');
$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('tr:off')");
verifies_since();
$s->query_safe('COMMIT');
is(verifies_since(), 1, 'and commits ask Redis');
$node->safe_psql('postgres',
	"ALTER SYSTEM RESET rlock.client_tracking; SELECT pg_reload_conf()");
ok(tracking_armed(), 'on again once reset');

# - refused by an ACL: the worker's user may not use CLIENT TRACKING
$redis->cmd('ACL', 'SETUSER', 'default', '-client|tracking');
$redis->cmd('CLIENT', 'KILL', 'ID', $redis->client_id('rlock_command'));
ok( RlockTest::wait_until(
		sub {
			$node->safe_psql('postgres',
				"SELECT command_connection FROM rlock_status()") eq 'ready';
		}, 15),
	'with CLIENT TRACKING refused the worker connects');
ok( RlockTest::wait_until(
		sub { slurp_file($node->logfile) =~ /Redis refused client-side tracking/ },
		15),
	'and says once that Redis refused tracking');
verifies_since();
$tracking_asked = 0;
for my $i (1 .. 10)
{
	$s->query_safe('BEGIN');
	$s->query_safe("SELECT rlock_try('tr:refused:$i')");
	$s->query_safe('COMMIT');
}
is(verifies_since(), 10, 'commits ask Redis then');
is($s->{stderr}, '', 'and commit');
is($tracking_asked, 0, 'the refused CLIENT TRACKING is not asked again on that connection');
$redis->cmd('ACL', 'SETUSER', 'default', '+client|tracking');

$s->quit;
$node->stop;
done_testing();
