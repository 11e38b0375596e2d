# Semaphores through the faults of 086 and 018: Redis restarted, the
# worker terminated, a waiter's backend killed, while permits are held
# and waited for.  Every look at a semaphore checks that its available
# count and its members ({NAME}:timeout) add up to no more than its
# permits, and the end of each round that they add up to exactly that.
#
# - Redis restarted with its data (appendfsync always): the members are
#   the same; the waiters, which went on waiting, are subscribed again
#   and get the permits when the holders give them back (leases of 60 s:
#   only the messages can wake them); a session hold is renewed on the
#   restarted server past its old lease; a transaction holder commits
#   without an error, as 086's locks do;
# - Redis stopped and restarted while a release and an acquire wait for
#   their replies (the server frozen, so they may have run without their
#   replies reaching the worker): each session's count and its members in
#   Redis agree, nothing is counted twice;
# - Redis restarted with its data lost: the name is gone and every hold
#   with it; a session hold is reported lost, a transaction holder fails
#   its commit with 40001; their releases give nothing back, so nobody
#   gets a permit until the count is set again; then the waiter does;
# - Redis down longer than the watchdog's lease: the holds are lost and
#   told so (a WARNING, 40001 at commit), and the waiter gets the permits;
# - acquires cancelled while Redis is frozen: once it runs them, their
#   grants are undone, every permit they took, a session's earlier one
#   kept;
# - the worker terminated: a waiter gets 55000 and leaves nothing, the
#   holds are renewed by the next worker and the commit succeeds;
# - a waiter's backend killed with SIGKILL (the instance restarts): it
#   leaves no member, the holder of the other instance keeps its
#   permits, and a new waiter gets them at the release.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;

plan skip_all => 'semaphores do not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start(
	args => [ '--appendonly', 'yes', '--appendfsync', 'always' ]);
# connect_timeout longer than an outage, so that waiters see it through
my @opt = (
	connect_timeout => '5s',
	command_timeout => '2s',
	conf => [ "rlock.watchdog_timeout = '1500ms'", 'restart_after_crash = on' ]);
my $na = RlockTest::node('semfault_a', $redis, @opt);
my $nb = RlockTest::node('semfault_b', $redis, @opt);

sub session { return RlockTest::session($_[0] // $na) }
sub sql { return $na->safe_psql('postgres', $_[0]) }

sub redis_ms
{
	my ($s, $us) = @{ $redis->cmd('TIME') };
	return $s * 1000 + int($us / 1000);
}

# the members of semaphore $name, member => lease end
sub members { return { @{ $redis->cmd('ZRANGE', "{$_[0]}:timeout", 0, -1, 'WITHSCORES') } } }

# Available plus taken on semaphore $name, read at one instant (one
# script); any sum over $permits{$name} is a permit counted twice,
# remembered in @twice.
my (%permits, @twice);
my $total_lua = "return tonumber(redis.call('get', KEYS[1]) or '0') + redis.call('zcard', KEYS[2])";

sub total
{
	my ($name) = @_;
	my $sum = $redis->cmd('EVAL', $total_lua, 2, $name, "{$name}:timeout");
	push @twice, "$name: $sum of $permits{$name}" if $sum > $permits{$name};
	return $sum;
}

sub exact
{
	my ($name) = @_;
	return total($name) == $permits{$name};
}

sub set_permits
{
	my ($name, $n) = @_;
	$permits{$name} = $n;
	is(sql("SELECT rlock_set_permits('$name', $n)"), 't', "$name: $n permits set");
}

# the members of session $s on semaphore $name, by its owner in rlock_locks
sub members_of
{
	my ($s, $name) = @_;
	my $owner = $s->{rlock_node}->safe_psql('postgres',
		"SELECT owner FROM rlock_locks WHERE key = '$name' AND pid = $s->{rlock_pid} LIMIT 1");
	return 0 if $owner eq '';
	return scalar grep { /^\Q$owner\E:\d+$/ } keys %{ members($name) };
}

sub waiting { return RlockTest::count_waiting($_[0]{rlock_node}, $_[0]{rlock_pid}) == 1 }

# wait until $n of @s no longer wait, checking the count meanwhile
sub served
{
	my ($name, $n, @s) = @_;
	return RlockTest::wait_until(
		sub { total($name); (grep { !waiting($_) } @s) >= $n }, 5);
}

$_->safe_psql('postgres', 'CREATE TABLE written (v int)') for $na, $nb;

#---- Redis restarted with its data ----
{
	# sf:a's holds have leases of 60 s: its waiters look again only when
	# told; sf:w's are renewed by the watchdog
	set_permits('sf:a', 3);
	set_permits('sf:w', 3);
	my $t = session();
	$t->query_safe("BEGIN; SELECT rlock_try_permits('sf:a', 2, '0', '60 s'); INSERT INTO written VALUES (1)");
	my $h = session();
	$h->query_safe("SELECT rlock_session_try_permits('sf:a', 1, '0', '60 s')");
	my $w1 = session();
	RlockTest::send_query($w1, "BEGIN; SELECT rlock_try_permits('sf:a', 2, '40 s');");
	my $w2 = session($nb);
	RlockTest::send_query($w2, "SELECT rlock_session_try_permits('sf:a', 1, '40 s');");
	ok(RlockTest::wait_until(sub { waiting($w1) && waiting($w2) }, 5),
		'two waiters of two instances wait for sf:a');
	my $s = session();
	$s->query_safe("SELECT rlock_session_try_permits('sf:w', 2)");
	my $x = session();
	$x->query_safe("BEGIN; SELECT rlock_try_permits('sf:w', 1)");
	ok(exact('sf:a') && exact('sf:w'), 'the counts are exact before the restart');
	my %before = (a => members('sf:a'), w => members('sf:w'));
	my $lease_end = (sort { $b <=> $a } values %{ $before{w} })[0];

	$redis->restart;
	my $back = redis_ms();
	ok(RlockTest::wait_for_redis($na, 5) && RlockTest::wait_for_redis($nb, 5),
		'Redis restarted with its data: both instances serve');
	is_deeply([ sort keys %{ members('sf:a') } ], [ sort keys %{ $before{a} } ],
		'sf:a has the same members');
	is_deeply([ sort keys %{ members('sf:w') } ], [ sort keys %{ $before{w} } ],
		'sf:w too');
	ok(exact('sf:a') && exact('sf:w'), 'the counts are exact');
	ok(waiting($w1) && waiting($w2), 'the waiters still wait');
	ok( RlockTest::wait_until(
			sub {
				my @ends = values %{ members('sf:w') };
				@ends == 3 && !grep { $_ <= $back + 1500 } @ends;
			},
			5),
		'the watchdog renews sf:w\'s holds on the restarted server');
	ok(RlockTest::wait_until(sub { redis_ms() > $lease_end + 500 }, 5)
		  && keys %{ members('sf:w') } == 3 && exact('sf:w'),
		'past the lease they had at the restart they are still held');
	is($s->query_safe("SELECT rlock_held_permits('sf:w')"), '2',
		'the session still counts its two');
	is($x->query('COMMIT'), '', 'the transaction holder commits');
	is($x->{stderr}, '', 'without an error');
	ok(RlockTest::wait_until(sub { total('sf:w') == 3 && ($redis->cmd('GET', 'sf:w') // 0) == 1 }, 5),
		'and gives its permit back');

	my $t0 = time;
	is($t->query('COMMIT'), '', 'sf:a\'s transaction holder commits too');
	ok(served('sf:a', 1, $w1, $w2), 'a waiter gets the permits it gave back');
	ok(exact('sf:a'), 'the count is exact');
	is($h->query_safe("SELECT rlock_session_release_permits('sf:a')"), 't',
		'the session holder releases its permit');
	ok(served('sf:a', 2, $w1, $w2), 'the other waiter gets what it waits for');
	my $took = time - $t0;
	cmp_ok($took, '<', 10, "both long before the 60 s leases end ($took s)");
	my ($out1) = RlockTest::collect($w1);
	my ($out2) = RlockTest::collect($w2);
	like("$out1 $out2", qr/^t\s+t$/, 'both got their permits');
	is(members_of($w1, 'sf:a') . ' ' . members_of($w2, 'sf:a'), '2 1',
		'two members of the first waiter, one of the second');
	ok(exact('sf:a') && ($redis->cmd('GET', 'sf:a') // 0) == 0, 'none available');
	$w1->query_safe('COMMIT');
	$w2->query_safe("SELECT rlock_session_release_permits('sf:a')");
	$s->query_safe("SELECT rlock_session_release_permits('sf:w', 2)");
	ok( RlockTest::wait_until(
			sub {
				($redis->cmd('GET', 'sf:a') // 0) == 3 && ($redis->cmd('GET', 'sf:w') // 0) == 3
				  && total('sf:a') == 3 && total('sf:w') == 3;
			},
			5),
		'all back: 3 of 3 available on both, no member');
	$_->quit for $t, $h, $w1, $w2, $s, $x;
}

#---- Redis stopped while a release and an acquire wait for replies ----
{
	set_permits('sr:a', 4);
	my $p = session();
	my $q = session($nb);
	$p->query_safe("SELECT rlock_session_try_permits('sr:a', 3)");
	$redis->freeze;
	RlockTest::send_query($p, "SELECT rlock_session_release_permits('sr:a', 2);");
	RlockTest::send_query($q, "SELECT rlock_session_try_permits('sr:a', 2, '20 s');");
	ok(RlockTest::wait_until(sub { waiting($p) && waiting($q) }, 1),
		'a release and an acquire wait for a frozen Redis');
	# thawed and stopped at once: what it read may run, its replies lost
	$redis->restart;
	ok(RlockTest::wait_for_redis($na, 5) && RlockTest::wait_for_redis($nb, 5),
		'Redis restarted with its data: both instances serve');
	my ($pout, $perr) = RlockTest::collect($p);
	my ($qout, $qerr) = RlockTest::collect($q);
	diag("the release: '$pout' '$perr'; the acquire: '$qout' '$qerr'");
	my $ph = $p->query_safe("SELECT rlock_held_permits('sr:a')");
	my $qh = $q->query_safe("SELECT rlock_held_permits('sr:a')");
	ok($ph == 1 || $ph == 3, "the releasing session holds 1 or 3 ($ph)");
	ok($qh == 0 || $qh == 2, "the acquiring one 0 or 2 ($qh)");
	ok( RlockTest::wait_until(
			sub { members_of($p, 'sr:a') == $ph && members_of($q, 'sr:a') == $qh && exact('sr:a') },
			5),
		'Redis holds what each session counts, and the count is exact');
	$p->query_safe("SELECT rlock_session_release_permits('sr:a', $ph)");
	$q->query_safe("SELECT rlock_session_release_permits('sr:a', $qh)") if $qh;
	ok(RlockTest::wait_until(sub { ($redis->cmd('GET', 'sr:a') // 0) == 4 && exact('sr:a') }, 5),
		'all four back after the releases');
	$_->quit for $p, $q;
}

#---- Redis restarted with its data lost ----
#
# The name and its members are gone: every hold is lost, and no release
# may give back a permit Redis no longer counts.  The semaphore has none
# until its count is set again.
{
	set_permits('sl:a', 2);
	my $s = session();
	$s->query_safe("SELECT rlock_session_try_permits('sl:a')");
	my $x = session($nb);
	$x->query_safe("BEGIN; SELECT rlock_try_permits('sl:a'); INSERT INTO written VALUES (2)");
	my $w = session();
	RlockTest::send_query($w, "SELECT rlock_session_try_permits('sl:a', 1, '40 s');");
	ok(RlockTest::wait_until(sub { waiting($w) }, 5), 'a waiter waits for sl:a');

	$redis->restart(empty => 1);
	ok(RlockTest::wait_for_redis($na, 5) && RlockTest::wait_for_redis($nb, 5),
		'Redis restarted without its data: both instances serve');
	ok( RlockTest::wait_until(
			sub { $s->query("SELECT rlock_held_permits('sl:a')") eq '0' }, 5),
		'the session hold is no longer counted');
	like($s->{stderr}, qr/WARNING:  01000: session-scoped lock "sl:a" was lost/,
		'and reported lost');
	$s->{stderr} = '';
	$x->query('COMMIT');
	like($x->{stderr}, qr/ERROR:  40001: lock "sl:a" was lost before the transaction committed/,
		'the transaction holder fails its commit with 40001');
	$x->{stderr} = '';
	is($s->query("SELECT rlock_session_release_permits('sl:a')"), 'f',
		'a release of the lost hold gives nothing back');
	$s->{stderr} = '';
	is(sql("SELECT rlock_available_permits('sl:a')"), '0', 'none available');
	ok(waiting($w), 'the waiter still waits');
	is($redis->cmd('EXISTS', 'sl:a', '{sl:a}:timeout'), 0,
		'no renewal or release brought the name or a member back');

	$permits{'sl:a'} = 2;
	my $t0 = time;
	is(sql("SELECT rlock_set_permits('sl:a', 2)"), 't', 'the count is set again');
	my ($out, $err) = RlockTest::collect($w);
	my $took = time - $t0;
	is($out, 't', 'the waiter gets its permit');
	cmp_ok($took, '<', 3, "once told ($took s)");
	ok(exact('sl:a') && members_of($w, 'sl:a') == 1, 'one member, one available');
	$w->query_safe("SELECT rlock_session_release_permits('sl:a')");
	ok(RlockTest::wait_until(sub { ($redis->cmd('GET', 'sl:a') // 0) == 2 && exact('sl:a') }, 5),
		'both back after the release');
	$_->quit for $s, $x, $w;
}

#---- Redis down longer than the watchdog's lease ----
#
# The documented window: a hold lives through an outage shorter than its
# lease.  Past it the permits are anyone's; the holders learn it, and the
# waiter that went on waiting gets them.
{
	set_permits('so:a', 2);
	my $s = session();
	$s->query_safe("SELECT rlock_session_try_permits('so:a')");
	my $x = session($nb);
	$x->query_safe("BEGIN; SELECT rlock_try_permits('so:a')");
	my $w = session();
	RlockTest::send_query($w, "SELECT rlock_session_try_permits('so:a', 2, '40 s');");
	ok(RlockTest::wait_until(sub { waiting($w) }, 5), 'a waiter for both permits waits');
	my $lease_end = (sort { $b <=> $a } values %{ members('so:a') })[0];
	$redis->stop;
	# down past the leases (1.5 s), within connect_timeout (5 s)
	my $t0 = time;
	RlockTest::wait_until(sub { time > $t0 + 2 }, 3);
	$redis->restart;
	cmp_ok(redis_ms(), '>', $lease_end, 'Redis is back after the leases ended');
	my ($out, $err) = RlockTest::collect($w);
	is($out, 't', 'the waiter that went on waiting gets both permits');
	ok(exact('so:a') && members_of($w, 'so:a') == 2, 'they are its two members, the count exact');
	ok( RlockTest::wait_until(
			sub { $s->query("SELECT rlock_held_permits('so:a')") eq '0' }, 5),
		'the session holder no longer counts its permit');
	like($s->{stderr}, qr/WARNING:  01000: session-scoped lock "so:a" was lost/,
		'and is told so');
	$s->{stderr} = '';
	$x->query('COMMIT');
	like($x->{stderr}, qr/ERROR:  40001: lock "so:a" was lost before the transaction committed/,
		'the transaction holder fails its commit with 40001');
	$x->{stderr} = '';
	ok(exact('so:a') && members_of($w, 'so:a') == 2, 'its abort took nothing from the waiter');
	$w->query_safe("SELECT rlock_session_release_permits('so:a', 2)");
	ok(RlockTest::wait_until(sub { ($redis->cmd('GET', 'so:a') // 0) == 2 && exact('so:a') }, 5),
		'both back after the release');
	$_->quit for $s, $x, $w;
}

#---- grants that arrive after their waiters gave up ----
#
# Redis frozen with permits available: a session holding one permit and
# asking for two more, and a transaction asking for one, are cancelled
# while their acquires are on the wire.  The grants are undone, all of
# each: the session is left with its first permit, the transaction with
# none (the worker once handed back one permit of every late grant, so
# the session kept two in Redis, renewed while it lived).
{
	set_permits('sc:a', 3);
	my $p = session();
	my $q = session();
	$p->query_safe("SELECT rlock_session_try_permits('sc:a')");
	$redis->freeze;
	RlockTest::send_query($p, "SELECT rlock_session_try_permits('sc:a', 2);");
	RlockTest::send_query($q, "BEGIN; SELECT rlock_try_permits('sc:a');");
	ok(RlockTest::wait_until(sub { waiting($p) && waiting($q) }, 1),
		'two acquires wait for a frozen Redis');
	$na->safe_psql('postgres', "SELECT pg_cancel_backend($_->{rlock_pid})") for $p, $q;
	my @err = map { (RlockTest::collect($_))[1] } $p, $q;
	like("@err", qr/57014.*57014/s, 'both are cancelled');
	$redis->thaw;
	$q->query('ROLLBACK');
	is($p->query_safe("SELECT rlock_held_permits('sc:a')"), '1',
		'the session counts its first permit');
	ok( RlockTest::wait_until(
			sub {
				members_of($p, 'sc:a') == 1 && keys %{ members('sc:a') } == 1
				  && ($redis->cmd('GET', 'sc:a') // 0) == 2;
			},
			5),
		'once Redis runs them, the grants are undone: one member left, two available');
	ok(exact('sc:a'), 'the count is exact');
	$p->query_safe("SELECT rlock_session_release_permits('sc:a')");
	ok(RlockTest::wait_until(sub { ($redis->cmd('GET', 'sc:a') // 0) == 3 && exact('sc:a') }, 5),
		'all three back');
	$_->quit for $p, $q;
}

#---- the worker terminated while permits are held and waited for ----
{
	set_permits('sw:a', 3);
	my $s = session();
	$s->query_safe("SELECT rlock_session_try_permits('sw:a', 2)");
	my $x = session();
	$x->query_safe("BEGIN; SELECT rlock_try_permits('sw:a')");
	my $w = session();
	RlockTest::send_query($w, "SELECT rlock_session_try_permits('sw:a', 1, '40 s');");
	ok(RlockTest::wait_until(sub { waiting($w) }, 5), 'a waiter waits for sw:a');
	my $old = RlockTest::worker_pid($na);
	$na->safe_psql('postgres', "SELECT pg_terminate_backend($old)");
	my (undef, $err) = RlockTest::collect($w);
	like($err, qr/ERROR:  55000/, 'the waiter gets 55000');
	ok(RlockTest::wait_for_new_worker($na, $old, 10) && RlockTest::wait_for_redis($na, 5),
		'a new worker starts and serves');
	my $back = redis_ms();
	ok( RlockTest::wait_until(
			sub { keys %{ members('sw:a') } == 3 && !grep { $_ <= $back + 1500 } values %{ members('sw:a') } },
			5),
		'the new worker renews the three permits held');
	is(members_of($w, 'sw:a'), 0, 'the waiter has none');
	ok(exact('sw:a'), 'the count is exact');
	is($s->query_safe("SELECT rlock_held_permits('sw:a')"), '2', 'the session counts its two');
	is($x->query('COMMIT'), '', 'the transaction holder commits');
	is($x->{stderr}, '', 'without an error');
	$s->query_safe("SELECT rlock_session_release_permits('sw:a', 2)");
	ok(RlockTest::wait_until(sub { ($redis->cmd('GET', 'sw:a') // 0) == 3 && exact('sw:a') }, 5),
		'all three back');
	$_->quit for $s, $x, $w;
}

#---- a waiter's backend killed with SIGKILL ----
{
	set_permits('sk:a', 2);
	my $h = session($nb);
	$h->query_safe("SELECT rlock_session_try_permits('sk:a', 2, '0', '60 s')");
	my $w = session();
	RlockTest::send_query($w, "SELECT rlock_session_try_permits('sk:a', 1, '40 s');");
	ok(RlockTest::wait_until(sub { waiting($w) }, 5), 'a waiter waits for sk:a');
	my $old = RlockTest::worker_pid($na);
	kill 'KILL', $w->{rlock_pid};
	ok(RlockTest::wait_back($na, 60) && RlockTest::wait_for_new_worker($na, $old, 60),
		'the instance restarts after the SIGKILL');
	ok(RlockTest::wait_for_redis($na, 10), 'and serves');
	is($na->safe_psql('postgres', 'SELECT count(*) FROM rlock_locks'), '0',
		'it shows no hold or waiter');
	is(members_of($h, 'sk:a') . ' ' . scalar(keys %{ members('sk:a') }), '2 2',
		'the members are the holder\'s two, none of the killed waiter');
	ok(exact('sk:a'), 'the count is exact');
	my $w2 = session();
	RlockTest::send_query($w2, "SELECT rlock_session_try_permits('sk:a', 2, '40 s');");
	ok(RlockTest::wait_until(sub { waiting($w2) }, 5), 'a new waiter waits');
	my $t0 = time;
	$h->query_safe("SELECT rlock_session_release_permits('sk:a', 2)");
	my ($out) = RlockTest::collect($w2);
	my $took = time - $t0;
	is($out, 't', 'and gets both permits at the release');
	cmp_ok($took, '<', 3, "at once ($took s)");
	$w2->query_safe("SELECT rlock_session_release_permits('sk:a', 2)");
	ok(RlockTest::wait_until(sub { ($redis->cmd('GET', 'sk:a') // 0) == 2 && exact('sk:a') }, 5),
		'both back');
	$_->quit for $h, $w2;
}

is(join('; ', @twice), '', 'no look at a semaphore found a permit counted twice');
is(join(' ', sort grep { !/^rlock_instance:/ && !/^rlocktest:/ && !/^s[a-z]:a$|^sf:w$/ }
		@{ $redis->cmd('KEYS', '*') }),
	'', 'nothing but the semaphores\' counts is left in Redis');

done_testing();
