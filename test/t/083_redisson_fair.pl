# rlock's fair locks against Redisson's getFairLock, for each Redisson
# version of RlockTest::Redisson:
#
# - ten waiters, Java threads and SQL sessions of two instances in turn,
#   queue behind a holder and get the lock exactly in the order they
#   came, each woken by the release before it (rlock's tells a Java head
#   on its channel, Redisson's an rlock head on its own);
# - each side's release wakes the other side's head on its channel (the
#   latency of each, ten times, printed);
# - a SQL waiter that times out, is cancelled, or whose backend is
#   terminated leaves no entry behind, and the Java waiter behind it gets
#   the lock at the holder's release, not when that entry would go stale;
# - a Java lock() behind a SQL holder renewed past the waiter's estimate
#   (Redisson 3.23 then waits only for the message on its channel) is
#   woken by the release.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;
use RlockTest::Redis;
use RlockTest::Redisson;
use RlockTest::TLS;

plan skip_all => 'the Redisson cases run in the plain round'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my @nodes = map { RlockTest::node("fairj_$_", $redis) } 'a', 'b';
# an instance whose watchdog renews short leases
my $short = RlockTest::node('fairj_short', $redis, conf => ["rlock.watchdog_timeout = '2s'"]);

sub queue { return $redis->cmd('LRANGE', "redisson_lock_queue:{$_[0]}", 0, -1) }

sub percentile
{
	my ($p, @v) = @_;
	@v = sort { $a <=> $b } @v;
	return @v ? $v[ int($p * $#v + 0.5) ] : -1;
}

for my $version (@RlockTest::Redisson::VERSIONS)
{
	my $java = RlockTest::Redisson->start($redis, version => $version);
	my $v = "[$version]";
	my $k = "fair:$version";

	#---- ten waiters, both sides, two instances ----

	my $h = $nodes[0]->background_psql('postgres');
	$h->query_safe("SELECT rlock_session_try_fair('$k')");
	my @w;
	for my $i (1 .. 10)
	{
		if ($i % 2)
		{
			my $s = $nodes[ ($i / 2) % 2 ]->background_psql('postgres',
				on_error_stop => 0);
			RlockTest::send_query($s, "SELECT rlock_session_try_fair('$k', '60 s');");
			push @w, { sql => $s, name => "SQL $i" };
		}
		else
		{
			my $actor = "j$i.1";
			push @w, { java => $java->send($actor, 'fair.trylock', $k, 60000),
				actor => $actor, name => "Java $i" };
		}
		ok(RlockTest::wait_until(sub { @{ queue($k) } == $i }, 10),
			"$v waiter $i ($w[-1]{name}) is queued");
	}
	$h->query_safe("SELECT rlock_session_release_fair('$k')");
	my $order = '';
	for my $x (@w)
	{
		# the next one in the queue gets the lock, and gives it back
		my $got;
		if ($x->{sql})
		{
			my ($out) = RlockTest::collect($x->{sql});
			$got = $out eq 't';
			$x->{sql}->query_safe("SELECT rlock_session_release_fair('$k')") if $got;
			$x->{sql}->quit;
		}
		else
		{
			my $r = $java->result($x->{java}, 15);
			$got = $r && $r->{ok} && $r->{value} eq 'true';
			$java->call($x->{actor}, 'fair.unlock', $k) if $got;
		}
		$order .= $got ? '.' : 'x';
		last unless $got;
	}
	is($order, '.' x 10, "$v each got the lock in the order they queued");
	is_deeply(queue($k), [], "$v the queue is empty");

	#---- wake-up latency of each pair, ten times ----

	my (@to_sql, @to_java);
	my $ws = $nodes[1]->background_psql('postgres', on_error_stop => 0);
	for my $i (1 .. 10)
	{
		# a Redisson fair unlock tells the SQL head on its channel
		$java->call('jw.1', 'fair.trylock', $k, 0);
		RlockTest::send_query($ws,
			"SELECT extract(epoch FROM clock_timestamp()) FROM (SELECT rlock_session_try_fair('$k', '20 s')) l WHERE l.rlock_session_try_fair;");
		RlockTest::wait_until(sub { @{ queue($k) } == 1 }, 10);
		my $r = $java->result($java->send('jw.1', 'fair.unlock', $k), 10);
		my ($out) = RlockTest::collect($ws);
		push @to_sql, ($1 - $r->{start}) * 1000 if $out =~ /^(\d+\.\d+)$/m;

		# rlock's release tells the Java head on its channel
		my $id = $java->send('jw.1', 'fair.trylock', $k, 20000);
		RlockTest::wait_until(sub { @{ queue($k) } == 1 }, 10);
		my $t0 = time;
		$ws->query_safe("SELECT rlock_session_release_fair('$k')");
		$r = $java->result($id, 25);
		push @to_java, ($r->{at} - $t0) * 1000 if $r && $r->{value} eq 'true';
		$java->call('jw.1', 'fair.unlock', $k);
	}
	$ws->quit;
	is(scalar @to_sql, 10, "$v ten SQL fair waiters woken by a Redisson fair unlock");
	is(scalar @to_java, 10, "$v ten Redisson fair waiters woken by rlock's release");
	diag(sprintf(
			'%s wake-up, ms: Redisson fair unlock to SQL head p50 %.1f p99 %.1f; SQL release to Redisson head p50 %.1f p99 %.1f',
			$v, percentile(0.5, @to_sql), percentile(0.99, @to_sql),
			percentile(0.5, @to_java), percentile(0.99, @to_java)));

	#---- a SQL waiter that gives up, Java behind it ----

	for my $how ('timeout', 'pg_cancel_backend', 'pg_terminate_backend')
	{
		$h->query_safe("SELECT rlock_session_try_fair('$k')");
		my $s = $nodes[1]->background_psql('postgres', on_error_stop => 0);
		my $pid = $s->query_safe('SELECT pg_backend_pid()');
		RlockTest::send_query($s, "SELECT rlock_try_fair('$k', '"
			  . ($how eq 'timeout' ? '2 s' : '60 s') . "');");
		ok(RlockTest::wait_until(sub { @{ queue($k) } == 1 }, 10), "$v $how: SQL queued");
		my $id = $java->send('jb.1', 'fair.trylock', $k, 30000);
		ok(RlockTest::wait_until(sub { @{ queue($k) } == 2 }, 10), "$v $how: Java behind it");
		if ($how eq 'timeout')
		{
			my ($out) = RlockTest::collect($s);
			like($out, qr/^f$/m, "$v $how: the SQL wait runs out");
		}
		else
		{
			$nodes[1]->safe_psql('postgres', "SELECT $how($pid)");
		}
		ok(RlockTest::wait_until(sub { @{ queue($k) } == 1 }, 5),
			"$v $how: the SQL entry is gone, Java's left");
		my $t0 = time;
		$h->query_safe("SELECT rlock_session_release_fair('$k')");
		my $r = $java->result($id, 20);
		ok($r && $r->{value} eq 'true', "$v $how: Java gets the lock at the release");
		cmp_ok($r->{at} - $t0, '<', 5, "$v $how: at once") if $r;
		$java->call('jb.1', 'fair.unlock', $k);
		eval { $s->quit };
	}
	$h->quit;

	#---- a Redisson lock() whose estimate ran out ----

	# The SQL holder's watchdog renews a 2 s lease; the Java lock() queued
	# behind it waits longer than the lease it saw.  Redisson 3.23 then
	# answers its retry with a negative time and waits for nothing but
	# the "0" on its own channel; later versions retry within the lease.
	# Either way rlock's release must wake it.
	{
		my $kl = "fairlock:$version";
		my $hs = $short->background_psql('postgres');
		$hs->query_safe("SELECT rlock_session_try_fair('$kl')");
		my $id = $java->send('jl.1', 'fair.lock', $kl);
		ok(RlockTest::wait_until(sub { @{ queue($kl) } == 1 }, 10), "$v lock(): queued");
		my $t0 = time;
		ok( RlockTest::wait_until(
				sub { time - $t0 > 3 && RlockTest::wait_for_renewal($redis, $kl, 3) }, 10),
			"$v lock(): the holder's 2 s lease renewed past the waiter's estimate");
		ok(!$java->result($id, 0.1), "$v lock(): Java still waits");
		$t0 = time;
		$hs->query_safe("SELECT rlock_session_release_fair('$kl')");
		my $r = $java->result($id, 15);
		ok($r && $r->{ok}, "$v lock(): rlock's release wakes it");
		cmp_ok($r->{at} - $t0, '<', 5, "$v lock(): at once") if $r;
		$java->call('jl.1', 'fair.unlock', $kl);
		$hs->quit;
	}
	$java->stop;
}

done_testing();
