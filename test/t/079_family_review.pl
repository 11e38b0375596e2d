# Review of the read-write blocker (076): cases where a waiter of this
# instance for a name held by a Redisson read-write lock could miss the
# message that frees it, with the data and messages written by hand.
#
# - a request that joins the line behind a waiter the read-write lock
#   keeps waiting listens on the read-write channel too: when the first
#   waiter gives up, the line is still woken by the write unlock's
#   message, not at the lease end.
# - once the read-write lock is gone and the lock goes from one local
#   holder to the next, the line is handed it with one try per
#   acquisition as ever: the "1" every rlock release also publishes on
#   the read-write channel sends no other waiter of the line to fail.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;
use RlockTest::Redis;
use RlockTest::Transfer qw(plain_shas scripts_on);
use RlockTest::TLS;

plan skip_all => 'the messages do not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('review', $redis);

sub sql { return $node->safe_psql('postgres', $_[0]) }

sub derived
{
	my ($prefix, $key) = @_;
	return $key =~ /\{/ ? "$prefix:$key" : "$prefix:{$key}";
}

sub numsub { return $redis->cmd('PUBSUB', 'NUMSUB', $_[0])->[1] }

sub waiting
{
	my ($key) = @_;
	return sql("SELECT count(*) FROM rlock_locks WHERE key = '$key' AND state = 'waiting'");
}

# A transaction that waits up to $wait for $key, then says when it got it
sub start_waiter
{
	my ($key, $wait) = @_;
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->{rlock_pid} = $s->query_safe('SELECT pg_backend_pid()');
	RlockTest::send_query($s,
		"BEGIN; SELECT rlock_try('$key', '$wait'), extract(epoch FROM clock_timestamp());");
	return $s;
}

sub outcome
{
	my ($s) = @_;
	my ($out, $err) = RlockTest::collect($s);
	return $out =~ /^(t|f)\|(\d+\.\d+)$/m ? ($1, $2) : ('', $err);
}

sub write_lock
{
	my ($key, $ms) = @_;
	$redis->cmd('HSET', $key, 'mode', 'write', 'java-uuid:1:write', '1');
	$redis->cmd('PEXPIRE', $key, $ms);
}

#---- the line behind a waiter that gives up still hears the unlock ----

for my $key ('line:a', 'line{b}')
{
	my $rwchan = derived('redisson_rwlock', $key);
	write_lock($key, 60000);
	my $first = start_waiter($key, '3 s');
	ok(RlockTest::wait_until(sub { waiting($key) == 1 && numsub($rwchan) == 1 }, 10),
		"$key: the first waiter waits, listening on $rwchan");
	my $second = start_waiter($key, '40 s');
	ok(RlockTest::wait_until(sub { waiting($key) == 2 }, 10),
		"$key: a second one joins the line");
	my @got = outcome($first);
	is($got[0], 'f', "$key: the first one gives up at its 3 s");
	$first->query_safe('ROLLBACK');
	$first->quit;
	ok(RlockTest::wait_until(sub { waiting($key) == 1 }, 10),
		"$key: the second one waits on");
	is(numsub($rwchan), 1, "$key: still listening on the read-write channel");
	my $t0 = time;
	$redis->cmd('DEL', $key);
	$redis->cmd('PUBLISH', $rwchan, '1');
	my $prompt = RlockTest::wait_until(sub { waiting($key) == 0 }, 10);
	ok($prompt, "$key: the write unlock's message lets the line in, not the 60 s lease");
	$node->safe_psql('postgres', "SELECT pg_cancel_backend($second->{rlock_pid})")
	  unless $prompt;
	@got = outcome($second);
	is($got[0], 't', "$key: the second waiter got it") if $prompt;
	$second->query_safe('ROLLBACK');
	$second->quit;
	ok(RlockTest::wait_until(sub { numsub($rwchan) == 0 }, 10),
		"$key: nobody waits: the read-write channel is left");
}

#---- after the read-write lock, the local line: one try each ----

{
	my $key = 'herd';
	my $rwchan = derived('redisson_rwlock', $key);
	my %sha = plain_shas(qw(acquire release transfer));
	write_lock($key, 60000);
	my @s = (start_waiter($key, '30 s'));
	ok(RlockTest::wait_until(sub { waiting($key) == 1 && numsub($rwchan) == 1 }, 10),
		'the first of three waits for the write lock');
	for my $i (2 .. 3)
	{
		push @s, start_waiter($key, '30 s');
		RlockTest::wait_until(sub { waiting($key) == $i }, 10);
	}
	is(waiting($key), 3, 'two more join its line');
	$redis->cmd('DEL', $key);
	$redis->cmd('PUBLISH', $rwchan, '1');
	ok(RlockTest::wait_until(sub { waiting($key) == 2 }, 10),
		'the write unlock lets one of them in');
	for my $left (2, 1)
	{
		my $pid = sql("SELECT pid FROM rlock_locks WHERE key = '$key' AND state = 'held'");
		my ($h) = grep { $_->{rlock_pid} eq $pid } @s;
		is((outcome($h))[0], 't', "the holder got it ($left behind it)");
		# the tries of the message's round are over once they wait again
		ok(RlockTest::wait_until(sub { waiting($key) == $left }, 10),
			"$left wait behind it");
		my $mon = $redis->monitor;
		$h->query_safe('COMMIT');
		ok(RlockTest::wait_until(sub { waiting($key) == $left - 1 }, 10),
			'its commit hands the lock on');
		my $seen = scripts_on(\%sha, $key, $mon->drain(0.5));
		my $acquires = () = $seen =~ /\bacquire\b/g;
		is($acquires, 1,
			"the commit costs the line one try, not one per waiter ($seen)");
		@s = grep { $_ != $h } @s;
		$h->quit;
	}
	my ($last) = @s;
	is((outcome($last))[0], 't', 'the last one got it');
	$last->query_safe('COMMIT');
	$last->quit;
	ok(RlockTest::wait_until(sub { numsub($rwchan) == 0 }, 10),
		'nobody waits: the read-write channel is left');
}

done_testing();
