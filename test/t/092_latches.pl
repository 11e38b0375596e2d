# Count-down latches (rlock_latch_*) between sessions of two instances,
# on Redisson's layout:
#
# - the layout: the count at NAME, deleted at zero, "0" published on
#   redisson_countdownlatch__channel__{NAME} when it gets there, "1" when
#   a latch is set or deleted;
# - waiters of both instances are woken together by the count-down that
#   reaches zero, not by the ones before it;
# - a wait ends with its bound, lock_timeout, statement_timeout or a
#   cancel, holding nothing and leaving no waiter behind;
# - a wait without bound inside a transaction that holds a lock keeps
#   the lock (the hazard doc/sql.md warns about);
# - a name in braces takes the latch's channel with braces around all of
#   it, as Redisson names it.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;
use RlockTest::Redis;
use RlockTest::TLS;

plan skip_all => 'latches do not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $na = RlockTest::node('latch_a', $redis);
my $nb = RlockTest::node('latch_b', $redis);

sub sql { return $na->safe_psql('postgres', $_[0]) }

# the messages published on $channel while $code runs
sub messages_during
{
	my ($channel, $code) = @_;
	my $sub = $redis->connect;
	$sub->send_cmd('SUBSCRIBE', $channel);
	$sub->read_reply(5);
	$code->();
	my @got;
	while (my $m = $sub->next_message(0.3))
	{
		push @got, $m->[1];
	}
	return \@got;
}

#---- set, counted down, woken together ----
{
	my @msgs = @{ messages_during('redisson_countdownlatch__channel__{l:a}',
		sub { sql("SELECT rlock_latch_set('l:a', 2)") }) };
	is("@msgs", '1', 'setting a latch publishes "1"');
	is($redis->cmd('GET', 'l:a'), '2', 'the count is the string at the name');

	my @w = map { RlockTest::session($_) } ($na, $na, $nb);
	RlockTest::send_query($_, "SELECT rlock_latch_wait('l:a', '20 s');") for @w;
	ok( RlockTest::wait_until(
			sub {
				$na->safe_psql('postgres', "SELECT count(*) FROM rlock_locks WHERE key = 'l:a' AND state = 'waiting'") == 2
				  && $nb->safe_psql('postgres', "SELECT count(*) FROM rlock_locks WHERE key = 'l:a' AND state = 'waiting'") == 1;
			}, 10),
		'three waiters, on both instances');
	is(sql("SELECT rlock_latch_count_down('l:a')"), '1', 'a count-down leaves 1');
	ok(!RlockTest::wait_until(
			sub { RlockTest::count_waiting($na, map { $_->{rlock_pid} } @w[0, 1]) < 2 }, 0.5),
		'the waiters still wait');
	my $t0 = time;
	@msgs = @{ messages_during('redisson_countdownlatch__channel__{l:a}',
		sub { is($nb->safe_psql('postgres', "SELECT rlock_latch_count_down('l:a')"), '0', 'the last one leaves 0') }) };
	my @got = map { (RlockTest::collect($_))[0] } @w;
	my $took = time - $t0;
	is(join(',', @got), 't,t,t', 'all three waiters see the latch open');
	cmp_ok($took, '<', 1, "together, at once ($took s)");
	is("@msgs", '0', 'the count-down to zero published "0"');
	is($redis->cmd('EXISTS', 'l:a'), 0, 'and deleted the latch');
	is(sql("SELECT count(*) FROM rlock_locks"), '0', 'nothing held or waiting');
	$_->quit for @w;
}

#---- the end of a wait ----
{
	sql("SELECT rlock_latch_set('l:b', 1)");
	my ($rc, $out, $err, $took) = RlockTest::timed_psql($na, "SELECT rlock_latch_wait('l:b', '300 ms')");
	is($out, 'f', 'a bounded wait runs out: false');
	cmp_ok($took, '>=', 0.3, 'not before its bound');
	($rc, $out, $err) = RlockTest::timed_psql($na, "SET lock_timeout = '200ms'; SELECT rlock_latch_wait('l:b')");
	like($err, qr/55P03/, 'a wait without bound ends with lock_timeout (55P03)');
	($rc, $out, $err) = RlockTest::timed_psql($na, "SET statement_timeout = '200ms'; SELECT rlock_latch_wait('l:b')");
	like($err, qr/57014/, 'and with statement_timeout (57014)');

	my $s = RlockTest::session($na);
	RlockTest::send_query($s, "SELECT rlock_latch_wait('l:b');");
	ok(RlockTest::waiting_in_sql($na, 'l:b'), 'a wait without bound waits');
	sql("SELECT pg_cancel_backend($s->{rlock_pid})");
	my ($o, $e) = RlockTest::collect($s);
	like($e, qr/57014/, 'a cancel ends it');
	is(sql("SELECT count(*) FROM rlock_locks"), '0', 'no waiter left behind');
	ok(RlockTest::wait_until(sub { $redis->cmd('PUBSUB', 'NUMSUB', 'redisson_countdownlatch__channel__{l:b}')->[1] == 0 }, 5),
		'and the channel is let go');
	$s->quit;
}

#---- a deleted latch is open: its waiters go on ----
{
	sql("SELECT rlock_latch_set('l:e', 5)");
	my $w = RlockTest::session($nb);
	RlockTest::send_query($w, "SELECT rlock_latch_wait('l:e', '20 s');");
	ok(RlockTest::waiting_in_sql($nb, 'l:e'), 'a waiter of a latch at 5');
	my $t0 = time;
	is(sql("SELECT rlock_latch_delete('l:e')"), 't', 'deleted');
	my ($o) = RlockTest::collect($w);
	is($o, 't', 'the waiter finds it open');
	cmp_ok(time - $t0, '<', 1, 'at once');
	$w->quit;
}

#---- a wait in a transaction that holds a lock keeps the lock ----
{
	sql("SELECT rlock_latch_set('l:c', 1)");
	my $s = RlockTest::session($na);
	$s->query_safe("BEGIN; SELECT rlock_try('l:held')");
	RlockTest::send_query($s, "SELECT rlock_latch_wait('l:c', '20 s');");
	ok(RlockTest::waiting_in_sql($na, 'l:c'), 'the holder waits for the latch');
	is($nb->safe_psql('postgres', "SELECT rlock_try('l:held')"), 'f',
		'its lock stays held meanwhile');
	$nb->safe_psql('postgres', "SELECT rlock_latch_count_down('l:c')");
	my ($o) = RlockTest::collect($s);
	is($o, 't', 'opened, the wait ends');
	$s->query_safe('COMMIT');
	$s->quit;
}

#---- a braced name: Redisson braces all of it in the channel ----
{
	sql("SELECT rlock_latch_set('{l}:d', 1)");
	my $w = RlockTest::session($nb);
	RlockTest::send_query($w, "SELECT rlock_latch_wait('{l}:d', '20 s');");
	ok(RlockTest::waiting_in_sql($nb, '{l}:d'), 'a waiter of a braced name');
	is($redis->cmd('PUBSUB', 'NUMSUB', 'redisson_countdownlatch__channel__{{l}:d}')->[1], 1,
		'listens on redisson_countdownlatch__channel__{{l}:d}');
	sql("SELECT rlock_latch_count_down('{l}:d')");
	my ($o) = RlockTest::collect($w);
	is($o, 't', 'and is woken there');
	$w->quit;
}

#---- Redis refuses what is not a latch ----
{
	$redis->cmd('HSET', 'l:hash', 'f', 1);
	my ($rc, $out, $err) = RlockTest::timed_psql($na, "SELECT rlock_latch_count_down('l:hash')");
	like($err, qr/58000/, 'counting down a hash: 58000');
	is($redis->cmd('TYPE', 'l:hash'), 'hash', 'left as it was');
}

done_testing();
