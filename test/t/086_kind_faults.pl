# The watchdog, the check before commit, the end of a wait and the faults
# of the plain lock's suites (013, 010/015, 023, 017, 022), asked the same
# way of each kind: exclusive, shared and fair.  Per kind:
#
# - the watchdog keeps a transaction's hold through a query three leases
#   long (a shared hold's timeout key too), and a session hold is renewed;
# - a hold removed in Redis fails the commit with 40001, and a session
#   hold removed is reported lost (WARNING, held 0);
# - a waiter whose wait runs out, that hits lock_timeout (55P03) or
#   statement_timeout (57014), is cancelled or terminated, leaves nothing:
#   no row in rlock_locks, no reader field, no queue entry;
# - a backend terminated while it holds, with a lease of a minute, frees
#   its holds at once, and a waiter of the kind gets the lock;
# - Redis stopped: a waiter fails with 58030 within connect_timeout +
#   command_timeout; Redis back with its data, the holder still holds,
#   commits, and nothing is left (a fair waiter's give-up, which could not
#   be sent, goes out when Redis is back);
# - the worker terminated while a hold is taken: the next worker takes it
#   over, and the commit releases it.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;

plan skip_all => 'the kinds do not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start(
	args => [ '--appendonly', 'yes', '--appendfsync', 'always' ]);
my $node = RlockTest::node('kindfaults', $redis,
	connect_timeout => '1s',
	command_timeout => '1s',
	conf => ["rlock.watchdog_timeout = '1500ms'"]);
# connect + command timeout, and a modest margin for scheduling
my $budget = 3;

my %suffix = (exclusive => '', shared => '_shared', fair => '_fair');

# what conflicts with a hold of the kind, to make a waiter of the kind
# wait: a writer for a reader
my %blocker = (exclusive => 'rlock_try', shared => 'rlock_try', fair => 'rlock_try_fair');

sub f { my ($kind, $name) = @_; return "rlock_$name$suffix{$kind}" }

sub session { return RlockTest::session($node) }

sub timeout_keys { return @{ $redis->cmd('KEYS', "{$_[0]}:*rwlock_timeout*") } }
sub queue_len
{
	my ($key) = @_;
	return $redis->cmd('LLEN', "redisson_lock_queue:{$key}")
	  + $redis->cmd('ZCARD', "redisson_lock_timeout:{$key}");
}

# the hold of the kind on $key is in Redis, its lease running: an
# exclusive one marked as a write lock, a shared one a read lock with a
# live timeout key
sub in_redis
{
	my ($kind, $key) = @_;
	return 0 unless $redis->cmd('PTTL', $key) > 0;
	my $mode = $redis->cmd('HGET', $key, 'mode') // '';
	return $mode eq 'write' unless $kind eq 'shared';
	my @t = timeout_keys($key);
	return $mode eq 'read' && @t == 1 && $redis->cmd('PTTL', $t[0]) > 0;
}

# nothing of $key left in Redis
sub nothing_left
{
	my ($key) = @_;
	return $redis->cmd('EXISTS', $key) == 0 && !timeout_keys($key) && queue_len($key) == 0;
}

# how many owners hold $key in Redis
sub owners { return scalar grep { $_ ne 'mode' } @{ $redis->cmd('HKEYS', $_[0]) } }

for my $kind (qw(exclusive shared fair))
{
	my $try = f($kind, 'try');
	my $stry = f($kind, 'session_try');
	my $held = f($kind, 'held');

	#---- the watchdog ----
	{
		my $key = "$kind:long";
		my $s = session();
		$s->query_safe("BEGIN; SELECT $try('$key')");
		ok($redis->cmd('PTTL', $key) <= 1500, "$kind: the hold has a watchdog lease of 1.5 s");
		my $t0 = time;
		$s->query_until(qr/sleeping/, "\\echo sleeping\nSELECT pg_sleep(4.5);\n");
		ok( RlockTest::wait_until(sub { time - $t0 > 3.2 }, 10) && in_redis($kind, $key),
			"$kind: more than two leases into a long query the hold is still there");
		$s->query("SELECT 'slept'");
		is($s->query_safe('COMMIT'), '', "$kind: the commit succeeds");
		ok(RlockTest::wait_until(sub { nothing_left($key) }, 5), "$kind: and releases it");

		$s->query_safe("SELECT $stry('$key:s')");
		ok(RlockTest::wait_for_renewal($redis, $key . ':s', 3), "$kind: a session hold is renewed");
		ok(in_redis($kind, "$key:s"), "$kind: and stays whole");
		is($s->query_safe("SELECT " . f($kind, 'session_release') . "('$key:s')"), 't',
			"$kind: and released");
		ok(nothing_left("$key:s"), "$kind: leaving nothing");
		$s->quit;
	}

	#---- the check before commit ----
	{
		my $key = "$kind:lost";
		my $s = session();
		$s->query_safe("BEGIN; SELECT $try('$key')");
		$redis->cmd('DEL', $key);
		$s->query('COMMIT');
		like($s->{stderr},
			qr/ERROR:  40001: lock "\Q$key\E" was lost before the transaction committed/,
			"$kind: a hold removed in Redis fails the commit with 40001");
		$s->{stderr} = '';
		is($s->query_safe("SELECT $held('$key')"), '0', "$kind: and the transaction rolled back");

		$s->query_safe("SELECT $stry('$key:s')");
		$redis->cmd('DEL', "$key:s");
		ok( RlockTest::wait_until(
				sub { $s->query("SELECT $held('$key:s')") eq '0' }, 5),
			"$kind: a session hold removed is no longer counted after the next renewal");
		like($s->{stderr}, qr/WARNING:  01000: session-scoped lock "\Q$key:s\E" was lost/,
			"$kind: and reported lost");
		$s->{stderr} = '';
		ok(RlockTest::wait_until(sub { nothing_left("$key:s") }, 3),
			"$kind: renewals do not bring it back");
		$s->quit;
	}

	#---- the end of a wait leaves nothing ----
	{
		my $key = "$kind:wait";
		my $h = session();
		$h->query_safe("BEGIN; SELECT $blocker{$kind}('$key')");
		my @ends = (
			[ 'its wait runs out', "SELECT $try('$key', '300 ms');", qr/^f$/, '' ],
			[ 'lock_timeout', "SET lock_timeout = '300ms'; SELECT " . f($kind, 'lock') . "('$key');",
				undef, qr/ERROR:  55P03/ ],
			[ 'statement_timeout',
				"SET statement_timeout = '300ms'; BEGIN; SELECT $try('$key', '1 min');",
				undef, qr/ERROR:  57014/ ],
			[ 'a cancel', "SELECT $stry('$key', '1 min');", undef, qr/ERROR:  57014/, 'cancel' ],
			[ 'termination', "SELECT $stry('$key', '1 min');", undef, undef, 'terminate' ]);
		for my $end (@ends)
		{
			my ($what, $sql, $out_re, $err_re, $signal) = @$end;
			my $w = session();
			RlockTest::send_query($w, $sql);
			ok(RlockTest::wait_until(sub { RlockTest::count_waiting($node, $w->{rlock_pid}) == 1 }, 5),
				"$kind: a waiter waits ($what)");
			is(queue_len($key), 2, "$kind: and is queued") if $kind eq 'fair';
			if ($signal)
			{
				$node->safe_psql('postgres', "SELECT pg_${signal}_backend($w->{rlock_pid})");
			}
			if ($signal && $signal eq 'terminate')
			{
				$w->{run}->finish;
			}
			else
			{
				my ($out, $err) = RlockTest::collect($w);
				like($out, $out_re, "$kind: $what: the try says so") if $out_re;
				like($err, $err_re, "$kind: $what: the error says so") if $err_re;
			}
			ok( RlockTest::wait_until(
					sub {
						$node->safe_psql('postgres',
							"SELECT count(*) FROM rlock_locks WHERE key = '$key'") == 1
						  && owners($key) == 1
						  && queue_len($key) == 0;
					},
					5),
				"$kind: after $what nothing of the waiter is left, here or in Redis");
			$w->quit unless $signal && $signal eq 'terminate';
		}
		$h->query_safe('COMMIT');
		ok(RlockTest::wait_until(sub { nothing_left($key) }, 5),
			"$kind: the holder's commit leaves nothing");
		$h->quit;
	}

	#---- a holder terminated ----
	{
		my $key = "$kind:term";
		my $h = session();
		$h->query_safe("SELECT $stry('$key:s', '0', '1 min')");
		$h->query_safe("BEGIN; SELECT $try('$key', '0', '1 min')");
		my $w = session();
		RlockTest::send_query($w, "SELECT $blocker{$kind}('$key', '1 min');");
		ok(RlockTest::wait_until(sub { RlockTest::count_waiting($node, $w->{rlock_pid}) == 1 }, 5),
			"$kind: a session waits for a holder with a lease of a minute");
		my $t0 = time;
		$node->safe_psql('postgres', "SELECT pg_terminate_backend($h->{rlock_pid})");
		$h->{run}->finish;
		my ($out, $err) = RlockTest::collect($w);
		is($out, 't', "$kind: the holder terminated, the waiter gets the lock");
		ok(RlockTest::wait_until(sub { nothing_left("$key:s") }, 5),
			"$kind: and the holder's session hold is freed too");
		ok(time - $t0 < 10, "$kind: long before the lease ends");
		$w->quit;
		ok(RlockTest::wait_until(sub { nothing_left($key) }, 5), "$kind: nothing is left");
	}

	#---- Redis stopped, then back with its data ----
	{
		my $key = "$kind:stop";
		my $h = session();
		# a lease longer than the outage
		$h->query_safe("BEGIN; SELECT $try('$key', '0', '1 min')");
		my $w = session();
		RlockTest::send_query($w, "SELECT $blocker{$kind}('$key', '1 min');");
		ok(RlockTest::wait_until(sub { RlockTest::count_waiting($node, $w->{rlock_pid}) == 1 }, 5),
			"$kind: a session waits");
		$redis->stop;
		my $t0 = time;
		ok(RlockTest::wait_until(sub { RlockTest::count_active($node, $w->{rlock_pid}) == 0 }, $budget),
			"$kind: Redis stopped, the wait ends within connect_timeout + command_timeout");
		my ($out, $err) = RlockTest::collect($w);
		like($err, qr/ERROR:  58030: could not reach Redis for lock "\Q$key\E"/,
			"$kind: with 58030");
		$redis->restart;
		ok(RlockTest::wait_for_redis($node, 5), "$kind: service resumes once Redis is back");
		ok(in_redis($kind, $key), "$kind: the hold is still there");
		ok(RlockTest::wait_until(sub { queue_len($key) == 0 }, 5),
			"$kind: and nothing of the waiter") if $kind eq 'fair';
		is($h->query('COMMIT'), '', "$kind: the holder commits");
		is($h->{stderr}, '', "$kind: without an error");
		ok(RlockTest::wait_until(sub { nothing_left($key) }, 5), "$kind: and nothing is left");
		$_->quit for $h, $w;
	}

	#---- the worker terminated while a hold is taken ----
	{
		my $key = "$kind:worker";
		my $old = RlockTest::worker_pid($node);
		my $h = session();
		# a lease of a minute: the new worker starts a second later
		$h->query_safe("BEGIN; SELECT $try('$key', '0', '1 min')");
		$node->safe_psql('postgres', "SELECT pg_terminate_backend($old)");
		ok(RlockTest::wait_for_new_worker($node, $old, 10), "$kind: a new worker starts");
		ok(RlockTest::wait_for_redis($node, 5), "$kind: and serves");
		ok(in_redis($kind, $key), "$kind: the hold is whole");
		is($h->query_safe("SELECT $held('$key')"), '1', "$kind: the session still counts it");
		is($h->query('COMMIT'), '', "$kind: the commit succeeds");
		is($h->{stderr}, '', "$kind: without an error");
		ok(RlockTest::wait_until(sub { nothing_left($key) }, 5), "$kind: and releases it");
		$h->quit;
	}
}

is(join(' ', sort grep { !/^rlock_instance:/ && !/^rlocktest:/ } @{ $redis->cmd('KEYS', '*') }),
	'', 'nothing is left in Redis');

done_testing();
