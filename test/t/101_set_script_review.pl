# Review of the first round of a set in one command (acquire_set.lua,
# test 100) against interruptions, faults and lies, one case a bug found
# and fixed:
#
# - rlock_locks showed nothing of a set whose one command was on its way
#   (Redis slow or stopped): the view read only single acquires from the
#   request slots, where a set's entries travel as pairs in the key
#   buffer, and its entries count nothing before the grant.  Taken member
#   by member, the member being taken showed as "acquiring"; now each key
#   of the set does.
#
# And checks that found nothing (every key handed back in Redis, every
# entry of the hold table free, the worker the same process unless the
# case stops it):
#
# - the call cancelled while the worker is stopped (the request not yet
#   taken), and, the backend stopped, once the worker has answered OK but
#   before the backend collected the answer (pg_cancel_backend and
#   pg_terminate_backend): the grant handed back;
# - the worker stopped (SIGTERM) with the command on the wire: 55000, the
#   grant that comes later handed back, the next worker serves the set;
# - ROLLBACK TO SAVEPOINT right after a set; a member released and the
#   set taken again, 500 times in one statement; SCRIPT FLUSH before a
#   set: each key counted once;
# - replicas confirming (rlock.sync_replicas = 1): the call given up
#   during the WAIT, which confirms later, never, or loses its replica
#   (SIGKILL): every key undone or handed back, the set taken afterwards;
# - rlock.max_key_length at its minimum (16): two keys in one command,
#   three member by member;
# - a relay answering the command with an integer out of range, another
#   type, an error: taken member by member, the worker the same, a bounded
#   number of commands.
use strict;
use warnings;

use Digest::SHA qw(sha1_hex);
use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::Hostile;
use RlockTest::Redis;
use RlockTest::TLS;

plan skip_all => 'sets do not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('set_review', $redis,
	command_timeout => '5s',
	conf => ['log_min_messages = warning']);
my $wpid = RlockTest::worker_pid($node);

# how many of @keys are in Redis
sub present
{
	return scalar grep { $redis->cmd('EXISTS', $_) } @_;
}

# the hold counts Redis has for @keys, one string per key
sub counts
{
	my ($r, @keys) = @_;
	return [ map { join(',', @{ $r->counts($_) }) } @keys ];
}

# Nothing of @keys left in Redis, every entry of $n's hold table free,
# and its worker still $pid.
sub nothing_left
{
	my ($what, $n, $pid, @keys) = @_;
	ok(RlockTest::wait_until(sub { present(@keys) == 0 }, 10),
		"$what: nothing left in Redis");
	ok( RlockTest::wait_until(
			sub {
				$n->safe_psql('postgres',
					'SELECT locks_in_use FROM rlock_status()') == 0;
			},
			10),
		"$what: every entry free")
	  or diag($n->safe_psql('postgres', 'SELECT * FROM rlock_locks'));
	is(RlockTest::worker_pid($n), $pid, "$what: the same worker");
}

# rows of rlock_locks of backend $pid in state $state, as "key" lines
sub rows_of
{
	my ($pid, $state) = @_;
	return $node->safe_psql('postgres',
		"SELECT string_agg(key, ' ' ORDER BY key) FROM rlock_locks WHERE pid = $pid AND state = '$state'"
	);
}

#---- rlock_locks shows a set's one command on its way ----

{
	my $s = RlockTest::session($node);
	$redis->freeze;
	RlockTest::send_query($s,
		"SELECT rlock_session_try_set('{vw:c,vw:a,vw:b}');");
	ok(RlockTest::wait_until(sub { RlockTest::count_waiting($node, $s->{rlock_pid}) == 1 }, 5),
		'a set on its way');
	is(rows_of($s->{rlock_pid}, 'acquiring'), 'vw:a vw:b vw:c',
		'rlock_locks shows each key as acquiring');
	is($node->safe_psql('postgres',
		"SELECT string_agg(DISTINCT scope || ' ' || mode || ' ' || kind, ',') FROM rlock_locks WHERE pid = $s->{rlock_pid}"),
		'session exclusive plain', 'in its scope, mode and kind');
	$redis->thaw;
	my ($out) = RlockTest::collect($s);
	is($out, 't', 'then taken');
	is(rows_of($s->{rlock_pid}, 'held'), 'vw:a vw:b vw:c', 'and held');
	$s->query_safe("SELECT rlock_session_release_set('{vw:a,vw:b,vw:c}')");
	nothing_left('view', $node, $wpid, qw(vw:a vw:b vw:c));
	$s->quit;
}

#---- cancelled before the worker took the request ----

{
	my $s = RlockTest::session($node);
	kill 'STOP', $wpid;
	$s->query("SET statement_timeout = '200ms'; SELECT rlock_try_set('{nt:a,nt:b}');");
	like($s->{stderr}, qr/57014/, 'not taken: cancelled');
	$s->{stderr} = '';
	kill 'CONT', $wpid;
	$s->query_safe('RESET statement_timeout');
	nothing_left('not taken', $node, $wpid, qw(nt:a nt:b));
	is($s->query_safe("SELECT rlock_session_try_set('{nt:a,nt:b}')"), 't',
		'not taken: the set is taken afterwards');
	is_deeply(counts($redis, qw(nt:a nt:b)), [ 1, 1 ], 'not taken: once each');
	$s->query_safe("SELECT rlock_session_release_set('{nt:a,nt:b}')");
	nothing_left('not taken, then released', $node, $wpid, qw(nt:a nt:b));
	$s->quit;
}

#---- answered OK, the backend gone before it collected the answer ----

for my $how ('cancel', 'terminate')
{
	my $s = RlockTest::session($node);
	my $pid = $s->{rlock_pid};
	$redis->freeze;
	RlockTest::send_query($s, "SELECT rlock_session_try_set('{ok:a,ok:b}');");
	ok(RlockTest::wait_until(sub { RlockTest::count_waiting($node, $pid) == 1 }, 5),
		"$how: on its way");
	kill 'STOP', $pid;
	$redis->thaw;
	# granted by the worker (its count), and answered (no acquire left)
	ok( RlockTest::wait_until(
			sub {
				rows_of($pid, 'acquiring') eq ''
				  && $node->safe_psql('postgres',
					"SELECT count(*) FROM rlock_locks WHERE key LIKE 'ok:%' AND count = 1") == 2;
			},
			5),
		"$how: granted and answered, not collected");
	$node->safe_psql('postgres', "SELECT pg_${how}_backend($pid)");
	kill 'CONT', $pid;
	if ($how eq 'cancel')
	{
		my (undef, $err) = RlockTest::collect($s);
		like($err, qr/57014/, "$how: the call is cancelled");
		is($s->query_safe(
			"SELECT count(*) FROM rlock_locks WHERE pid = $pid AND count > 0"),
			0, "$how: the session holds nothing");
		$s->quit;
	}
	else
	{
		eval { RlockTest::collect($s) };
		ok( RlockTest::wait_until(
				sub {
					$node->safe_psql('postgres',
						"SELECT count(*) FROM pg_stat_activity WHERE pid = $pid") == 0;
				},
				5),
			"$how: the session ends");
	}
	nothing_left("answered, $how", $node, $wpid, qw(ok:a ok:b));
}

#---- the worker stopped with the command on the wire ----

{
	my $s = RlockTest::session($node);
	$redis->freeze;
	RlockTest::send_query($s, "SELECT rlock_session_try_set('{ws:a,ws:b}');");
	ok(RlockTest::wait_until(sub { RlockTest::count_waiting($node, $s->{rlock_pid}) == 1 }, 5),
		'worker stopped: on its way');
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($wpid)");
	my (undef, $err) = RlockTest::collect($s);
	like($err, qr/55000/, 'worker stopped: the call fails');
	$redis->thaw;
	ok(RlockTest::wait_for_new_worker($node, $wpid, 20), 'worker stopped: a new worker');
	$wpid = RlockTest::worker_pid($node);
	nothing_left('worker stopped', $node, $wpid, qw(ws:a ws:b));
	is($s->query_safe("SELECT rlock_session_try_set('{ws:a,ws:b}')"), 't',
		'worker stopped: the next worker serves the set');
	$s->query_safe("SELECT rlock_session_release_set('{ws:a,ws:b}')");
	nothing_left('worker stopped, then released', $node, $wpid, qw(ws:a ws:b));
	$s->quit;
}

#---- savepoints, releases, NOSCRIPT ----

{
	my $s = RlockTest::session($node);
	$s->query_safe(
		"BEGIN; SAVEPOINT p; SELECT rlock_try_set('{sp:a,sp:b,sp:c}'); ROLLBACK TO p;");
	is($s->query_safe(
		"SELECT count(*) FROM rlock_locks WHERE pid = $s->{rlock_pid} AND count > 0"),
		0, 'savepoint: rolled back, nothing held');
	is($s->query_safe("SELECT rlock_try_set('{sp:a,sp:b,sp:c}')"), 't',
		'savepoint: taken again in the transaction');
	$s->query_safe('COMMIT');
	nothing_left('savepoint', $node, $wpid, qw(sp:a sp:b sp:c));

	is($s->query_safe(
		"SELECT count(*) FILTER (WHERE a AND b AND c AND d = 2) FROM (SELECT rlock_session_try('rs:a') a, rlock_session_release('rs:a') b, rlock_session_try_set('{rs:a,rs:b}') c, rlock_session_release_set('{rs:a,rs:b}') d FROM generate_series(1, 500)) x"),
		500, 'a member released, then the set: 500 rounds');
	nothing_left('released, then the set', $node, $wpid, qw(rs:a rs:b));

	$redis->cmd('SCRIPT', 'FLUSH');
	is($s->query_safe("SELECT rlock_session_try_set('{ns:a,ns:b}')"), 't',
		'SCRIPT FLUSH: taken');
	is_deeply(counts($redis, qw(ns:a ns:b)), [ 1, 1 ], 'SCRIPT FLUSH: once each');
	$s->query_safe("SELECT rlock_session_release_set('{ns:a,ns:b}')");
	nothing_left('SCRIPT FLUSH', $node, $wpid, qw(ns:a ns:b));
	$s->quit;
}

#---- replicas confirming: the call given up during the WAIT ----

{
	my $replica = $redis->start_replica;
	my $n = RlockTest::node('set_review_sync', $redis,
		conf => [
			'log_min_messages = warning', 'rlock.sync_replicas = 1',
			"rlock.sync_timeout = '2s'"
		]);
	my $npid = RlockTest::worker_pid($n);
	my @keys = qw(sy:a sy:b sy:c);
	my $sync_ready = sub {
		RlockTest::wait_until(
			sub {
				$n->safe_psql('postgres',
					'SELECT sync_connection FROM rlock_status()') eq 'ready';
			},
			20);
	};
	ok($sync_ready->(), 'WAIT: a sync connection');
	for my $case ('confirmed later', 'never confirmed', 'replica killed')
	{
		my $t = RlockTest::session($n);
		$replica->freeze;
		$t->query(
			"SET statement_timeout = '300ms'; SELECT rlock_session_try_set('{sy:a,sy:b,sy:c}');");
		like($t->{stderr}, qr/57014/, "WAIT, $case: the call given up");
		$t->{stderr} = '';
		$t->query_safe('RESET statement_timeout');
		is(present(@keys), 3, "WAIT, $case: the primary ran the set");
		$replica->thaw if $case eq 'confirmed later';
		$replica->kill9 if $case eq 'replica killed';
		nothing_left("WAIT, $case", $n, $npid, @keys);
		$replica->thaw if $case eq 'never confirmed';
		if ($case eq 'replica killed')
		{
			$replica = $redis->start_replica;
			ok($sync_ready->(), 'WAIT: a replica again');
		}
		is($t->query_safe("SELECT rlock_session_try_set('{sy:a,sy:b,sy:c}')"),
			't', "WAIT, $case: the set taken afterwards");
		is_deeply(counts($redis, @keys), [ 1, 1, 1 ], "WAIT, $case: once each");
		$t->query_safe("SELECT rlock_session_release_set('{sy:a,sy:b,sy:c}')");
		nothing_left("WAIT, $case, released", $n, $npid, @keys);
		$t->quit;
	}
	$n->stop;
	$replica->stop;
}

#---- rlock.max_key_length at its minimum: room for two entries ----

{
	my $n = RlockTest::node('set_review_short', $redis,
		conf => [ 'log_min_messages = warning', 'rlock.max_key_length = 16' ]);
	my @keys = qw(mk:aaaaaaaaaaaaa mk:bbbbbbbbbbbbb mk:c mk:d mk:e);
	my $mon = $redis->monitor;
	my $t = RlockTest::session($n);
	$mon->drain(0.05);
	is($t->query_safe("SELECT rlock_session_try_set('{$keys[0],$keys[1]}')"),
		't', '16 bytes: two keys of 16 bytes taken');
	my @ran = grep { /"EVALSHA".*"mk:/ } $mon->drain(0.2);
	is(scalar(@ran), 1, '16 bytes: in one command');
	is($t->query_safe("SELECT rlock_session_try_set('{mk:c,mk:d,mk:e}')"), 't',
		'16 bytes: three keys taken');
	@ran = grep { /"EVALSHA".*"mk:/ } $mon->drain(0.2);
	is(scalar(@ran), 3, '16 bytes: member by member');
	is($t->query_safe(
		"SELECT rlock_session_release_set('{" . join(',', @keys) . "}')"),
		5, '16 bytes: given back');
	ok(RlockTest::wait_until(sub { present(@keys) == 0 }, 5),
		'16 bytes: nothing left');
	$t->quit;
	$n->stop;
}

#---- lies in answer to the one command ----

{
	my $sha = sha1_hex(RlockTest::script_text(
			($ENV{TESTDIR} // '.') . '/src/kinds/plain/acquire_set.lua'));
	my $hostile = RlockTest::Hostile->start($redis->port);
	my $n = RlockTest::node('set_review_lies', $redis,
		connect_timeout => '3s',
		conf => [ 'log_min_messages = warning', 'rlock.port = ' . $hostile->port ]);
	my $npid = RlockTest::worker_pid($n);
	my $t = RlockTest::session($n);
	for my $lie (":3\r\n", ":-1\r\n", ":9223372036854775807\r\n",
		"\$1\r\nx\r\n", "*1\r\n:0\r\n", "-ERR no\r\n")
	{
		(my $name = $lie) =~ s/\r\n/ /g;
		ok(RlockTest::wait_for_redis($n, 10), "lie $name: connected");
		my $before = $hostile->commands;
		$hostile->replace('rlock_command', qr/^EVALSHA $sha /, $lie);
		is($t->query("SELECT rlock_session_try_set('{hl:a,hl:b}')"), 't',
			"lie $name: taken member by member")
		  or diag($t->{stderr});
		$t->{stderr} = '';
		is_deeply(counts($redis, qw(hl:a hl:b)), [ 1, 1 ], "lie $name: once each");
		cmp_ok($hostile->commands - $before, '<', 100,
			"lie $name: a bounded number of commands");
		$hostile->clear;
		$t->query_safe("SELECT rlock_session_release_set('{hl:a,hl:b}')");
		nothing_left("lie $name", $n, $npid, qw(hl:a hl:b));
	}
	$t->quit;
	$n->stop;
	$hostile->stop;
}

done_testing();
