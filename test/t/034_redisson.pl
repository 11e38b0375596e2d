# rlock against the real Redisson, in both directions and for each Redisson
# version of RlockTest::Redisson: exclusion, re-entry per owner, the
# information calls on both sides, wake-up on unlock (with its latency),
# lease expiry, forced unlocks, fencing tokens, unusual keys, the other
# Redisson objects that may meet a lock's name (read-write, fair and spin
# locks, MultiLock, RSemaphore), codecs.
# The watchdogs on both sides and the mixed stress run are in
# 035_redisson_long.pl.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;
use RlockTest::Redis;
use RlockTest::Redisson;
use RlockTest::TLS;

# What these cases test is the data and messages in Redis, the same
# whichever way rlock reaches it: they run once, in the plain round.
plan skip_all => 'the Redisson cases run in the plain round'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('main', $redis);

sub sql { return $node->safe_psql('postgres', $_[0]) }

# A transaction-scoped call in a transaction of its own.
sub in_xact { return sql("BEGIN; $_[0]; COMMIT") }

# The holds on a lock: owner => count.
sub fields { return $redis->holds($_[0]) }

sub percentile
{
	my ($p, @v) = @_;
	@v = sort { $a <=> $b } @v;
	return $v[ int($p * $#v + 0.5) ];
}

for my $version (@RlockTest::Redisson::VERSIONS)
{
	my $java = RlockTest::Redisson->start($redis, version => $version);
	is($java->version, $version, "Redisson $version runs");
	my $v = "[$version]";
	my $s = $node->background_psql('postgres', on_error_stop => 0);

	#---- exclusion, and what each side sees of the other ----

	$s->query_safe("BEGIN; SELECT rlock_try('x:$version')");
	is($java->call('a.1', 'trylock', "x:$version", 0), 'false',
		"$v a lock held by a transaction: tryLock fails");
	is($java->call('a.1', 'islocked', "x:$version"), 'true', "$v isLocked()");
	is($java->call('a.1', 'held', "x:$version"), 'false',
		"$v isHeldByCurrentThread() is false");
	my $jttl = $java->call('a.1', 'ttl', "x:$version");
	my $sttl = sql("SELECT extract(epoch FROM rlock_ttl('x:$version')) * 1000");
	cmp_ok(abs($jttl - $sttl), '<', 2000,
		"$v remainTimeToLive() ($jttl) and rlock_ttl ($sttl) agree");
	cmp_ok($jttl, '>', 20000, "$v the lease is the watchdog's 30 s");
	$s->query_safe('COMMIT');
	# (the commit queues the release: it reaches Redis a moment later)
	is($java->call('a.1', 'trylock', "x:$version", 5000), 'true',
		"$v once committed, tryLock succeeds");
	is(in_xact("SELECT rlock_try('x:$version')"), 'f',
		"$v a lock held by Redisson: rlock_try fails");
	is(sql("SELECT rlock_is_locked('x:$version')"), 't', "$v rlock_is_locked");
	$sttl = sql("SELECT extract(epoch FROM rlock_ttl('x:$version')) * 1000");
	$jttl = $java->call('a.1', 'ttl', "x:$version");
	cmp_ok(abs($jttl - $sttl), '<', 2000, "$v rlock_ttl agrees with Redisson");
	my $owner = $java->call('a.1', 'owner');
	is_deeply(fields("x:$version"), { $owner => 1 },
		"$v the hash holds Redisson's owner field <uuid>:<thread>");
	is(sql("SELECT holder FROM rlock_holder('x:$version')"), 'redisson',
		"$v rlock_holder says Redisson holds it");
	$java->call('a.1', 'unlock', "x:$version");
	is(sql("SELECT rlock_is_locked('x:$version')"), 'f',
		"$v unlock() frees it for SQL too");

	#---- re-entry counts stay per owner ----

	$java->call('a.1', 'lock', "r:$version");
	$java->call('a.1', 'lock', "r:$version");
	is($java->call('a.1', 'holdcount', "r:$version"), 2,
		"$v Redisson re-enters: getHoldCount() 2");
	is($java->call('a.2', 'trylock', "r:$version", 0), 'false',
		"$v another thread of the same client is another owner");
	is(sql("SELECT rlock_session_try('r:$version')"), 'f',
		"$v and so is a SQL session");
	$java->call('a.1', 'unlock', "r:$version");
	is(sql("SELECT rlock_session_try('r:$version')"), 'f',
		"$v one unlock of two: still held");
	$java->call('a.1', 'unlock', "r:$version");
	is($s->query_safe(
			"SELECT rlock_session_try('r:$version'), rlock_session_try('r:$version'), rlock_held('r:$version')"),
		't|t|2', "$v the second unlock frees it; SQL re-enters");
	is(scalar(values %{ fields("r:$version") }), 1, "$v one owner field");
	is((values %{ fields("r:$version") })[0], 2, "$v counting two");
	is($java->call('a.1', 'holdcount', "r:$version"), 0,
		"$v getHoldCount() counts only its own holds");
	$s->query_safe("SELECT rlock_session_release('r:$version')");
	is($java->call('a.1', 'trylock', "r:$version", 0), 'false',
		"$v one release of two: Redisson still excluded");
	$s->query_safe("SELECT rlock_session_release('r:$version')");
	is($java->call('a.1', 'trylock', "r:$version", 0), 'true',
		"$v the second release frees it for Redisson");
	$java->call('a.1', 'unlock', "r:$version");

	#---- wake-up on unlock, both ways, with its latency ----

	my (@to_java, @to_sql);
	for my $i (1 .. 10)
	{
		# a Redisson tryLock waiting on a transaction is woken by its
		# commit, long before the 30 s lease could end
		$s->query_safe("BEGIN; SELECT rlock_try('w:$version')");
		my $before = $redis->subscribers("w:$version");
		my $id = $java->send('b.1', 'trylock', "w:$version", 20000);
		RlockTest::wait_until(
			sub { $redis->subscribers("w:$version") > $before }, 10);
		my $t0 = time;
		$s->query_safe('COMMIT');
		my $r = $java->result($id, 25);
		ok($r && $r->{ok} && $r->{value} eq 'true',
			"$v wake-up $i: tryLock woken by the commit");
		push @to_java, ($r->{at} - $t0) * 1000 if $r;

		# an rlock_lock waiting on Redisson is woken by unlock()
		RlockTest::send_query($s,
			"SET statement_timeout = '20s'; SELECT extract(epoch FROM clock_timestamp()) FROM (SELECT rlock_session_lock('w:$version')) l;"
		);
		RlockTest::wait_until(
			sub {
				sql("SELECT count(*) FROM rlock_locks WHERE key = 'w:$version' AND state = 'waiting'"
				) == 1;
			},
			10);
		$r = $java->result($java->send('b.1', 'unlock', "w:$version"), 10);
		my ($out, $err) = RlockTest::collect($s);
		like($out, qr/^\d+\.\d+$/m, "$v wake-up $i: rlock_lock woken by unlock()")
		  or diag($err);
		push @to_sql, ($1 - $r->{start}) * 1000 if $out =~ /^(\d+\.\d+)$/m;
		$s->query_safe("RESET statement_timeout; SELECT rlock_session_release('w:$version')");
	}
	diag(sprintf(
			'%s wake-up, ms: SQL commit to Redisson p50 %.1f p99 %.1f; Redisson unlock to SQL p50 %.1f p99 %.1f',
			$v, percentile(0.5, @to_java), percentile(0.99, @to_java),
			percentile(0.5, @to_sql), percentile(0.99, @to_sql)));

	#---- a lease that ends hands the lock over ----

	$s->query_safe("SELECT rlock_session_try('le:$version', '0', '2 s')");
	my $t0 = time;
	my $r = $java->result($java->send('c.1', 'trylock', "le:$version", 15000), 20);
	ok($r && $r->{value} eq 'true', "$v a SQL lease that ends lets Redisson in");
	cmp_ok($r->{at} - $t0, '>', 1.5, "$v not before the lease ended");
	$s->query("SELECT rlock_session_release('le:$version')");
	like($s->{stderr}, qr/WARNING:  .*lost|no longer held/,
		"$v the session learns that its lease ran out");
	$s->{stderr} = '';
	$java->call('c.1', 'unlock', "le:$version");
	$java->call('c.1', 'lock', "le:$version", 2000);
	$t0 = time;
	is(in_xact("SELECT rlock_try('le:$version', '15 s')"), 't',
		"$v a Redisson lease that ends lets SQL in");
	cmp_ok(time - $t0, '>', 1.5, "$v not before the lease ended");

	#---- forced unlocks ----

	$s->query_safe("BEGIN; SELECT rlock_try('f:$version')");
	is($java->call('c.1', 'forceunlock', "f:$version"), 'true',
		"$v forceUnlock() removes a transaction's lock");
	$s->query('COMMIT');
	like($s->{stderr},
		qr/ERROR:  lock "f:$version" was lost before the transaction committed/,
		"$v the transaction fails at its commit (40001)");
	$s->{stderr} = '';
	$java->call('c.1', 'lock', "f:$version");
	is(sql("SELECT rlock_force_release('f:$version')"), 't',
		"$v rlock_force_release removes Redisson's lock");
	is($java->call('c.1', 'held', "f:$version"), 'false',
		"$v Redisson no longer holds it");
	$r = $java->result($java->send('c.1', 'unlock', "f:$version"), 10);
	is($r->{error}, 'java.lang.IllegalMonitorStateException',
		"$v and its unlock() says so");

	#---- one sequence of fencing tokens ----

	my @tokens;
	for (1 .. 3)
	{
		push @tokens, $java->call('d.1', 'fencedlock', "t:$version");
		$java->call('d.1', 'fencedunlock', "t:$version");
		push @tokens, in_xact("SELECT rlock_try_token('t:$version')");
	}
	is_deeply(\@tokens, [ map { $tokens[0] + $_ } 0 .. 5 ],
		"$v lockAndGetToken() and rlock_try_token draw one sequence: @tokens");
	is($java->call('d.1', 'token', "t:$version"), $tokens[-1],
		"$v getToken() sees the last SQL token");

	#---- rlock.key_prefix: the prefixed name on the Java side ----

	my $p = $node->background_psql('postgres');
	$p->query_safe("SET rlock.key_prefix = 'billing:'; BEGIN; SELECT rlock_try('stock:$version')");
	is($java->call('e.1', 'trylock', "billing:stock:$version", 0), 'false',
		"$v under key_prefix 'billing:', getLock(\"billing:stock:...\") is the same lock");
	$p->query_safe('COMMIT');
	$java->call('e.1', 'lock', "billing:stock:$version");
	is($p->query_safe("BEGIN; SELECT rlock_try('stock:$version'); COMMIT"), 'f',
		"$v and the other way round");
	$java->call('e.1', 'unlock', "billing:stock:$version");
	$p->quit;

	#---- keys with braces and characters beyond ASCII ----

	for my $key ("{order}:42:$version", "stock:\x{65e5}\x{672c}:$version",
		"caf\x{e9} {x}y:$version")
	{
		my $bytes = $key;
		utf8::encode($bytes);
		$java->call('e.1', 'lock', $key);
		is($redis->cmd('EXISTS', $bytes), 1, "$v Redisson's key is the UTF-8 name");
		my $q = $bytes;
		is(in_xact("SELECT rlock_try('$q')"), 'f', "$v SQL sees it held");
		$java->call('e.1', 'unlock', $key);
		is($s->query_safe("SELECT rlock_session_try('$q')"), 't',
			"$v and takes it after unlock()");
		is($java->call('e.1', 'trylock', $key, 0), 'false',
			"$v Redisson sees SQL's lock on it");
		is($java->call('e.1', 'islocked', $key), 'true', "$v isLocked() agrees");
		$s->query_safe("SELECT rlock_session_release('$q')");
	}

	#---- other kinds of Redisson lock on the same name ----

	# a read-write lock: Redisson's scripts join any hash that has no
	# "mode" field; rlock's has one, so both halves wait for SQL, and
	# rlock's release tells them on their channel (redisson_rwlock:{name})
	$s->query_safe("BEGIN; SELECT rlock_try('rw:$version')");
	my $sql_holds = fields("rw:$version");
	is($java->call('g.1', 'write.trylock', "rw:$version", 0), 'false',
		"$v a Redisson write lock waits for a transaction's lock");
	is($java->call('g.1', 'read.trylock', "rw:$version", 0), 'false',
		"$v so does a read lock");
	is($java->call('g.1', 'write.islocked', "rw:$version"), 'true',
		"$v and the write lock says it is locked");
	is_deeply(fields("rw:$version"), $sql_holds,
		"$v the transaction's hold is untouched");
	my $rwchan = "redisson_rwlock:{rw:$version}";
	my $before = $redis->cmd('PUBSUB', 'NUMSUB', $rwchan)->[1];
	my $id = $java->send('g.1', 'write.trylock', "rw:$version", 20000);
	ok(RlockTest::wait_until(
			sub { $redis->cmd('PUBSUB', 'NUMSUB', $rwchan)->[1] > $before }, 10),
		"$v a waiting write lock listens on the read-write channel");
	$t0 = time;
	$s->query_safe('COMMIT');
	$r = $java->result($id, 25);
	ok($r && $r->{value} eq 'true',
		"$v the write lock waiting on a transaction gets it after the commit");
	# its lease is the watchdog's 30 s: only the release's message can
	# have woken it this early
	cmp_ok($r->{at} - $t0, '<', 10, "$v woken by the release, not the lease");

	# the other way: a write lock makes rlock wait (not fail), and its
	# unlock wakes rlock's waiter
	my $rw_hash = $redis->cmd('HGETALL', "rw:$version");
	is(in_xact("SELECT rlock_try('rw:$version')"), 'f',
		"$v held by a write lock, rlock_try with no wait says busy");
	is_deeply($redis->cmd('HGETALL', "rw:$version"), $rw_hash,
		"$v and leaves the write lock as it was");
	RlockTest::send_query($s,
		"SELECT extract(epoch FROM clock_timestamp()) FROM (SELECT rlock_session_try('rw:$version', '20 s')) l WHERE l.rlock_session_try;");
	ok(RlockTest::waiting_in_sql($node, "rw:$version"),
		"$v rlock_session_try waits for the write lock");
	ok(RlockTest::wait_until(
			sub { $redis->cmd('PUBSUB', 'NUMSUB', $rwchan)->[1] > 0 }, 10),
		"$v listening on the read-write channel");
	$r = $java->result($java->send('g.1', 'write.unlock', "rw:$version"), 10);
	my ($out, $err) = RlockTest::collect($s);
	like($out, qr/^\d+\.\d+$/m, "$v the write lock's unlock() lets it in")
	  or diag($err);
	cmp_ok(($out =~ /^(\d+\.\d+)$/m ? $1 : 99) - $r->{start}, '<', 10,
		"$v woken by the unlock's message, not the lease");
	is(sql("SELECT holder FROM rlock_holder('rw:$version')"), 'rlock',
		"$v SQL holds the name");
	$s->query_safe("SELECT rlock_session_release('rw:$version')");

	# a read lock: rlock waits for its last reader
	is($java->call('g.1', 'read.trylock', "rw:$version", 0), 'true',
		"$v a read lock is taken");
	is($java->call('g.2', 'read.trylock', "rw:$version", 0), 'true',
		"$v and shared by a second thread");
	RlockTest::send_query($s,
		"SELECT extract(epoch FROM clock_timestamp()) FROM (SELECT rlock_session_try('rw:$version', '20 s')) l WHERE l.rlock_session_try;");
	ok(RlockTest::waiting_in_sql($node, "rw:$version"),
		"$v rlock_session_try waits for the readers");
	$java->call('g.1', 'read.unlock', "rw:$version");
	is(sql("SELECT count(*) FROM rlock_locks WHERE key = 'rw:$version' AND state = 'waiting'"),
		'1', "$v and still waits while one reader is left");
	$r = $java->result($java->send('g.2', 'read.unlock', "rw:$version"), 10);
	($out, $err) = RlockTest::collect($s);
	like($out, qr/^\d+\.\d+$/m, "$v the last reader's unlock() lets it in")
	  or diag($err);
	cmp_ok(($out =~ /^(\d+\.\d+)$/m ? $1 : 99) - $r->{start}, '<', 10,
		"$v woken by the message, not the lease");
	is($java->call('g.1', 'read.trylock', "rw:$version", 0), 'false',
		"$v a read lock now waits for SQL");
	$id = $java->send('g.1', 'read.trylock', "rw:$version", 20000);
	ok(RlockTest::wait_until(
			sub { $redis->cmd('PUBSUB', 'NUMSUB', $rwchan)->[1] > 0 }, 10),
		"$v the reader listens");
	$t0 = time;
	$s->query_safe("SELECT rlock_session_release('rw:$version')");
	$r = $java->result($id, 25);
	ok($r && $r->{value} eq 'true' && $r->{at} - $t0 < 10,
		"$v and is woken by SQL's release");
	$java->call('g.1', 'read.unlock', "rw:$version");

	# rlock_force_release removes a read-write lock too, and says so
	is($java->call('g.1', 'write.trylock', "rw:$version", 0), 'true',
		"$v a write lock again");
	is(in_xact("SELECT rlock_force_release('rw:$version')"), 't',
		"$v rlock_force_release removes it");
	is($redis->cmd('EXISTS', "rw:$version"), 0, "$v the key is gone");
	is($s->query_safe("SELECT rlock_session_try('rw:$version'), rlock_session_release('rw:$version')"),
		't|t', "$v SQL takes the name, the session unharmed");

	# a fair lock keeps the RLock's hash, so the two exclude each other;
	# its waiters listen on channels of their own: rlock's release
	# publishes on the channel of the queue's head, and a fair unlock
	# publishes nothing rlock's waiters hear, so rlock's waiter learns of
	# it at its next try, when the lease it saw would have ended
	$s->query_safe("BEGIN; SELECT rlock_try('fair:$version')");
	is($java->call('h.1', 'fair.trylock', "fair:$version", 0), 'false',
		"$v a Redisson fair lock waits for a transaction's lock");
	$id = $java->send('h.1', 'fair.trylock', "fair:$version", 20000);
	ok(RlockTest::wait_until(
			sub { $redis->cmd('LLEN', "redisson_lock_queue:{fair:$version}") == 1 }, 10),
		"$v its waiter is queued");
	$t0 = time;
	$s->query_safe('COMMIT');
	$r = $java->result($id, 25);
	ok($r && $r->{value} eq 'true',
		"$v its waiter gets it once the transaction ends");
	# the transaction's lease was the watchdog's 30 s
	cmp_ok($r->{at} - $t0, '<', 10,
		"$v woken by the release's message to the queue's head");
	is(in_xact("SELECT rlock_try('fair:$version')"), 'f',
		"$v held by the fair lock, rlock_try fails");
	$java->call('h.1', 'fair.unlock', "fair:$version");
	is(in_xact("SELECT rlock_try('fair:$version')"), 't',
		"$v and succeeds after its unlock()");

	# a spin lock keeps the RLock's hash but publishes nothing: it polls
	# for SQL's lock, and an rlock waiter learns of its unlock when the
	# lease it saw would have ended
	$s->query_safe("BEGIN; SELECT rlock_try('spin:$version')");
	is($java->call('i.1', 'spin.trylock', "spin:$version", 0), 'false',
		"$v a Redisson spin lock is refused a transaction's lock");
	$id = $java->send('i.1', 'spin.trylock', "spin:$version", 15000);
	$t0 = time;
	$s->query_safe('COMMIT');
	$r = $java->result($id, 20);
	ok($r && $r->{value} eq 'true', "$v its polling takes it once the transaction ends");
	cmp_ok($r->{at} - $t0, '<', 3, "$v soon after (it polls)");
	is(in_xact("SELECT rlock_try('spin:$version')"), 'f',
		"$v held by the spin lock, rlock_try fails");
	$java->call('i.1', 'spin.unlock', "spin:$version");
	$java->call('i.1', 'spin.trylock', "spin:$version", 0, 4000);
	RlockTest::send_query($s, "SELECT rlock_session_try('spin:$version', '15 s');");
	ok(RlockTest::waiting_in_sql($node, "spin:$version"), "$v an rlock waiter waits for it");
	my $unlocked = $java->result($java->send('i.1', 'spin.unlock', "spin:$version"), 10);
	($out, $err) = RlockTest::collect($s);
	is($out, 't', "$v and gets it after the spin lock's unlock()");
	cmp_ok(time - $unlocked->{at}, '>', 1.5,
		"$v not at the unlock (no message), when the 4 s lease would have ended");
	$s->query_safe("SELECT rlock_session_release('spin:$version')");

	# a MultiLock over RLocks: each member is an RLock
	my $multi = "ma:$version,mb:$version";
	$s->query_safe("BEGIN; SELECT rlock_try('mb:$version')");
	is($java->call('j.1', 'multi.trylock', $multi, 0), 'false',
		"$v a MultiLock with a member held by SQL is refused");
	is(sql("SELECT rlock_is_locked('ma:$version')"), 'f',
		"$v and gives back the member it took");
	$id = $java->send('j.1', 'multi.trylock', $multi, 15000);
	$t0 = time;
	$s->query_safe('COMMIT');
	$r = $java->result($id, 20);
	ok($r && $r->{value} eq 'true', "$v a waiting MultiLock gets all members once the transaction ends");
	cmp_ok($r->{at} - $t0, '<', 3, "$v woken by the unlock message");
	is(in_xact("SELECT rlock_try('ma:$version')") . in_xact("SELECT rlock_try('mb:$version')"),
		'ff', "$v held by the MultiLock, SQL is refused both members");
	RlockTest::send_query($s, "SELECT rlock_session_lock('mb:$version');");
	ok(RlockTest::waiting_in_sql($node, "mb:$version"), "$v an rlock waiter waits for a member");
	$unlocked = $java->result($java->send('j.1', 'multi.unlock', $multi), 10);
	($out, $err) = RlockTest::collect($s);
	is($err, '', "$v and gets it after the MultiLock's unlock()");
	cmp_ok(time - $unlocked->{at}, '<', 3, "$v woken by the unlock message");
	$s->query_safe("SELECT rlock_session_release('mb:$version')");

	# an RSemaphore is a string: each side's calls fail on the other's key
	is($java->call('k.1', 'sem.trysetpermits', "sem:$version", 1), 'true',
		"$v an RSemaphore with one permit");
	for my $call ("rlock_try('sem:$version')", "rlock_lock('sem:$version')",
		"rlock_force_release('sem:$version')")
	{
		$s->query("BEGIN; SELECT $call");
		like($s->{stderr},
			qr/ERROR:  Redis returned an error for lock "sem:$version"\nDETAIL:  .*WRONGTYPE/,
			"$v $call on a semaphore's name fails with Redis's WRONGTYPE (58000)");
		$s->{stderr} = '';
		$s->query('ROLLBACK');
	}
	is($redis->cmd('GET', "sem:$version"), '1', "$v the permits are untouched");
	is(sql("SELECT rlock_is_locked('sem:$version')"), 'f',
		"$v and rlock_is_locked reads the name as free");
	is($java->call('k.1', 'sem.tryacquire', "sem:$version", 0), 'true',
		"$v and the semaphore still works");
	$java->call('k.1', 'sem.release', "sem:$version");
	$redis->cmd('DEL', "sem:$version");
	$s->query_safe("BEGIN; SELECT rlock_try('sem:$version')");
	$sql_holds = fields("sem:$version");
	for my $op ('trysetpermits', 'tryacquire', 'release', 'available')
	{
		$r = $java->result($java->send('k.1', "sem.$op", "sem:$version", 1), 10);
		like("$r->{error} $r->{message}", qr/^org\.redisson\.client\.RedisException .*WRONGTYPE/,
			"$v on a name SQL holds, RSemaphore $op throws WRONGTYPE");
	}
	is_deeply(fields("sem:$version"), $sql_holds, "$v the transaction's hold is untouched");
	$s->query_safe('COMMIT');

	$s->quit;
	$java->stop;

	#---- the codec does not reach the lock ----

	my %seen;
	for my $codec ('default', 'string')
	{
		my $j = RlockTest::Redisson->start($redis, version => $version,
			codec => $codec);
		$j->call('a.1', 'lock', "codec:$version", 60000);
		my $f = fields("codec:$version");
		my ($field) = keys %$f;
		$field =~ s/^[0-9a-f-]{36}:\d+$/<uuid>:<thread>/;
		$seen{$codec} = join(' ', $field, values %$f,
			$redis->cmd('TYPE', "codec:$version"));
		is(in_xact("SELECT rlock_try('codec:$version')"), 'f',
			"$v codec $codec: SQL is excluded");
		$j->call('a.1', 'unlock', "codec:$version");
		is(in_xact("SELECT rlock_try('codec:$version')"), 't',
			"$v codec $codec: and let in after unlock()");
		$j->stop;
	}
	is($seen{string}, $seen{default},
		"$v the lock data is the same with either codec: $seen{default}");
}

$node->stop;
$redis->stop;
done_testing();
