# Review of the sets of locks (rlock_try_set and its forms) against
# interruptions and faults, each case a bug found and fixed:
#
# - rlock_session_release_set interrupted (statement_timeout) or failed
#   (58030, Redis not answering) while it waited for Redis's answer about
#   one member gave back that member only: the members after it stayed
#   held by the session, renewed by the watchdog, until the session
#   ended; now they are given back too;
# - a member found lost by the watchdog while the call held it, given
#   back when the call failed and taken again at once (by the next call,
#   before the worker had heard Redis about the give-back) was dropped as
#   lost right after the new grant: the mark of the old loss stayed on
#   the shared entry the session took again, and condemned the new hold
#   (a "was lost" warning, the hold released in Redis, 40001 at commit).
#   The same followed a ROLLBACK.  Now the mark goes once Redis has
#   answered the release of the last hold it was about.
#
# And checks that found nothing: a set waiting for a later member,
# holding an earlier one, when Redis stops answering (58030) gives back
# the earlier one once Redis is back; in a Redis Cluster, a set whose
# members live on three primaries waits for the busy one holding none of
# the others, is taken across the three, and given back whole when a
# member's primary stops answering (58030) or lock_timeout ends its wait.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::Redis;
use RlockTest::Cluster;
use RlockTest::TLS;

plan skip_all => 'sets do not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('sets_review', $redis,
	command_timeout => '3s',
	conf => ['log_min_messages = warning', "rlock.watchdog_timeout = '1500ms'"]);

# how many of @keys are in Redis
sub present
{
	return scalar grep { $redis->cmd('EXISTS', $_) } @_;
}

# how many keys session $s holds, as rlock_locks shows
sub holds_of
{
	my ($s) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM rlock_locks WHERE pid = $s->{rlock_pid} AND count > 0");
}

#---- a release of a set that fails half-way gives back every member ----

for my $case (
	[ 'statement_timeout', "SET statement_timeout = '300ms'", qr/57014/ ],
	[ 'Redis not answering', 'SELECT 1', qr/58030/ ])
{
	my ($what, $setup, $code) = @$case;
	my @keys = map { "rr:$_" } qw(a b c d);
	my $s = RlockTest::session($node);
	is($s->query_safe("SELECT rlock_session_try_set('{rr:a,rr:b,rr:c,rr:d}')"),
		't', "$what: a session holds a set");
	is(present(@keys), 4, "$what: all four in Redis");
	$s->query_safe($setup);
	$redis->freeze;
	RlockTest::send_query($s,
		"SELECT rlock_session_release_set('{rr:a,rr:b,rr:c,rr:d}');");
	my (undef, $err) = RlockTest::collect($s);
	$redis->thaw;
	like($err, $code, "$what: the release of the set fails");
	$s->query_safe('RESET statement_timeout');
	is(holds_of($s), 0, "$what: the session holds no member");
	ok(RlockTest::wait_until(sub { present(@keys) == 0 }, 10),
		"$what: every member given back in Redis");
	$s->quit;
}

#---- a loss seen before a give-back does not condemn the next grant ----

# wait until rlock_locks shows session $s's hold of $key lost
sub shown_lost
{
	my ($s, $key) = @_;
	return RlockTest::wait_until(
		sub {
			$node->safe_psql('postgres',
				"SELECT state FROM rlock_locks WHERE pid = $s->{rlock_pid} AND key = '$key'")
			  eq 'lost';
		},
		10);
}

{
	my $h1 = RlockTest::session($node);
	my $h2 = RlockTest::session($node);
	$h1->query_safe("SELECT rlock_session_try('rl:a')");
	$h2->query_safe("SELECT rlock_session_try('rl:b')");
	my $s = RlockTest::session($node);
	RlockTest::send_query($s, "SELECT rlock_session_lock_set('{rl:a,rl:b}');");
	ok(RlockTest::waiting_in_sql($node, 'rl:a'), 'a set waits for its first member');
	$h1->query_safe("SELECT rlock_session_release('rl:a')");
	ok(RlockTest::waiting_in_sql($node, 'rl:b'), 'then for the second, holding the first');
	$redis->cmd('DEL', 'rl:a');
	ok(shown_lost($s, 'rl:a'), 'the watchdog finds the first member gone');
	# the give-back and the next grant reach Redis only after the pause:
	# the session takes the key again before the worker hears about the
	# give-back
	$redis->cmd('CLIENT', 'PAUSE', 1000, 'WRITE');
	$node->safe_psql('postgres', "SELECT pg_cancel_backend($s->{rlock_pid})");
	my (undef, $err) = RlockTest::collect($s);
	like($err, qr/57014/, 'the set is cancelled');
	is($s->query_safe("SELECT rlock_session_try('rl:a')"), 't',
		'the session takes the given back member again');
	is($s->query("SELECT rlock_held('rl:a')"), 1, 'and holds it');
	is($s->{stderr}, '', 'without a warning of a loss');
	$s->{stderr} = '';
	ok($redis->cmd('EXISTS', 'rl:a'), 'held in Redis');
	$s->query("SELECT rlock_session_release('rl:a')");
	$s->{stderr} = '';
	$h2->query_safe("SELECT rlock_session_release('rl:b')");

	# the same after a ROLLBACK
	$s->query_safe("BEGIN; SELECT rlock_try('rl:r')");
	$redis->cmd('DEL', 'rl:r');
	ok(shown_lost($s, 'rl:r'), 'a transaction\'s hold found gone');
	$redis->cmd('CLIENT', 'PAUSE', 1000, 'WRITE');
	$s->query_safe('ROLLBACK');
	is($s->query_safe("BEGIN; SELECT rlock_try('rl:r')"), 't',
		'the next transaction takes it again');
	is($s->query("SELECT rlock_held('rl:r')"), 1, 'and holds it');
	$s->query('COMMIT');
	is($s->{stderr}, '', 'and commits without a loss');
	$s->{stderr} = '';
	ok(RlockTest::wait_until(sub { !$redis->cmd('EXISTS', 'rl:r') }, 5),
		'given back by the commit');
	$_->quit for $s, $h1, $h2;
}

#---- Redis not answering while a set waits holding a member ----

{
	my $h = RlockTest::session($node);
	$h->query_safe("SELECT rlock_session_try('rw:b')");
	my $s = RlockTest::session($node);
	my $h2 = RlockTest::session($node);
	$h2->query_safe("SELECT rlock_session_try('rw:c')");
	RlockTest::send_query($s, "SELECT rlock_session_lock_set('{rw:b,rw:c}');");
	ok(RlockTest::waiting_in_sql($node, 'rw:b'), 'a set waits for its busy first member');
	$h->query_safe("SELECT rlock_session_release('rw:b')");
	ok(RlockTest::waiting_in_sql($node, 'rw:c'), 'then for the second, holding the first');
	$redis->freeze;
	my (undef, $err) = RlockTest::collect($s);
	$redis->thaw;
	like($err, qr/58030/, 'Redis not answering ends the call with 58030');
	is(holds_of($s), 0, 'the session holds no member');
	ok(RlockTest::wait_until(sub { present('rw:b') == 0 }, 10),
		'the member it held is given back once Redis answers');
	$_->quit for $s, $h, $h2;
}

$node->stop;

#---- a set across the primaries of a Redis Cluster ----

{
	my $cluster = RlockTest::Cluster->start(primaries => 3, replicas => 0,
		node_timeout_ms => 60000);
	my @primaries = $cluster->primaries;
	my ($na, $nb) = RlockTest::cluster_nodes($cluster, 'sets_ca', 'sets_cb');
	my $on = sub { $cluster->owner($cluster->slot($_[0])) };
	# one key on each primary, in the primaries' order in the set's order
	my @k;
	for my $i (0 .. 2)
	{
		push @k, (grep { $on->($_)->port == $primaries[$i]->port }
			  map { "rc$i:$_" } 0 .. 300)[0];
	}
	my $set = '{' . join(',', reverse @k) . '}';
	my $in_cluster = sub { scalar grep { $on->($_)->cmd('EXISTS', $_) } @_ };
	my $held = sub {
		my ($s) = @_;
		return $s->{rlock_node}->safe_psql('postgres',
			"SELECT count(*) FROM rlock_locks WHERE pid = $s->{rlock_pid} AND count > 0");
	};

	my $h = RlockTest::session($na);
	$h->query_safe("SELECT rlock_session_try('$k[2]')");
	my $s = RlockTest::session($nb);
	RlockTest::send_query($s, "SELECT rlock_session_lock_set('$set');");
	ok(RlockTest::waiting_in_sql($nb, $k[2]), 'cluster: the set waits for the member held elsewhere');
	is($in_cluster->(@k[ 0, 1 ]), 0, 'cluster: holding none of the others');
	$h->query_safe("SELECT rlock_session_release('$k[2]')");
	my (undef, $err) = RlockTest::collect($s);
	is($err, '', 'cluster: the set is taken once the member is free');
	is($in_cluster->(@k), 3, 'cluster: on three primaries');
	is($s->query_safe("SELECT rlock_session_release_set('$set')"), 3,
		'cluster: and given back as a set');

	$primaries[1]->freeze;
	RlockTest::send_query($s, "SELECT rlock_session_lock_set('$set');");
	(undef, $err) = RlockTest::collect($s);
	like($err, qr/58030/, 'cluster: a member\'s primary not answering fails the set');
	is($held->($s), 0, 'cluster: the session holds no member');
	ok(RlockTest::wait_until(sub { $in_cluster->($k[0]) == 0 }, 5),
		'cluster: the member taken before is given back');
	$primaries[1]->thaw;
	ok(RlockTest::wait_until(sub { $in_cluster->(@k) == 0 }, 10),
		'cluster: nothing of the set once the primary answers');

	$h->query_safe("SELECT rlock_session_try('$k[2]')");
	$s->query_safe("SET lock_timeout = '300ms'");
	RlockTest::send_query($s, "SELECT rlock_session_lock_set('$set');");
	(undef, $err) = RlockTest::collect($s);
	like($err, qr/55P03/, 'cluster: lock_timeout ends the wait');
	is($held->($s), 0, 'cluster: the session holds no member');
	ok(RlockTest::wait_until(sub { $in_cluster->(@k[ 0, 1 ]) == 0 }, 5),
		'cluster: none of the others in Redis');
	$_->quit for $s, $h;
	$_->stop for $na, $nb;
}

done_testing();
