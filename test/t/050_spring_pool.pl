# What a connection pool and Spring make of rlock's errors, with the real
# HikariCP and Spring Framework 6.2 and 7.0 (test/interop's SpringPool,
# doc/sql.md's "Errors"): with Redis stopped, rlock_try, rlock_lock and a
# commit holding a lock fail through JdbcTemplate and
# JdbcTransactionManager with DataAccessResourceFailureException (58030)
# on every connection of a pool of four, and the pool keeps those four
# PostgreSQL connections; once Redis is back the same connections lock
# again.  doc/examples/SpringRetry.java retries from outside its
# @Transactional method a commit refused because the lock was deleted
# from Redis (40001, CannotAcquireLockException), a busy lock and an
# attempt made while Redis was down, and the balance moves once; a key too
# long (54000) is not retried.  A wait ended by lock_timeout raises
# UncategorizedSQLException (55P03), one ended by statement_timeout
# QueryTimeoutException (57014).  The wait binds as "?::interval" or a
# PGInterval, not as a String (42883).  No connection leaves the pool
# through all of it.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::Redis;
use RlockTest::Redisson;
use RlockTest::TLS;

# What is tested is what reaches Java, the same whichever way rlock
# reaches Redis: once, in the plain round.
plan skip_all => 'the Spring cases run in the plain round'
  if RlockTest::TLS::everywhere();

my $n = 4;
my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('spring', $redis,
	conf => [ "listen_addresses = '127.0.0.1'" ]);
my $jdbc = 'jdbc:postgresql://127.0.0.1:' . $node->port . '/postgres?user='
  . getpwuid($<);
sql('CREATE TABLE accounts (id int PRIMARY KEY, balance bigint)');
my $java;

sub sql { return $node->safe_psql('postgres', $_[0]) }

# The pool's backends as PostgreSQL sees them: pid@start, by pid.
sub backends
{
	return sql(
		q{SELECT string_agg(pid || '@' || backend_start, ',' ORDER BY pid)
		   FROM pg_stat_activity WHERE application_name = 'rlock-spring'});
}

# Run one call in $n transactions at once, one per connection of the
# pool; returns { pid => outcome }.
sub fan_result
{
	my ($id) = @_;
	my $r = $java->result($id, 60);
	die 'fan: no answer' unless $r;
	die "fan: $r->{error} $r->{message}" unless $r->{ok};
	return { map { split /:/, $_, 2 } split / /, $r->{value} };
}
sub fan { return fan_result($java->send('app', 'fan', @_)) }

# The pids a fan ran on, as "pids" answers them.
sub pids_of { return join(',', sort { $a <=> $b } keys %{ $_[0] }) }

# The outcomes of a fan as "<outcome> x<count>", for one message.
sub summary
{
	my ($o) = @_;
	my %c;
	$c{$_}++ for values %$o;
	return join(', ', map { "$_ x$c{$_}" } sort keys %c);
}

# "k=v k=v" as a hash.
sub fields { return { map { split /=/, $_, 2 } split / /, $_[0] } }

# Wait until the $n transactions of a fan on $key hold their locks;
# returns whether they did.
sub holding
{
	my ($key) = @_;
	return RlockTest::wait_until(
		sub {
			sql("SELECT count(*) FROM rlock_locks WHERE key LIKE '$key-%' AND state = 'held'")
			  == $n;
		},
		20);
}

# How many of the pool's backends wait for a row lock.
sub waiting_for_row
{
	return sql(
		"SELECT count(*) FROM pg_stat_activity
		  WHERE application_name = 'rlock-spring' AND wait_event_type = 'Lock'");
}

# The same cases with each Spring Framework version, each on an account
# of its own.
my $accounts = 0;
for my $spring ('6.2.19', '7.0.10')
{
	$java = RlockTest::Redisson->start_spring($jdbc, pool => $n,
		spring => $spring);
	like($java->version, qr/^spring-\Q$spring\E,/, "Spring $spring runs");
	spring_cases("[$spring]", ++$accounts);
	$java->stop;
	ok(RlockTest::wait_until(sub { backends() eq '' }, 10),
		"[$spring] its connections closed");
}

$node->stop;
done_testing();

# What one version of Spring makes of rlock's errors; $v labels the tests.
sub spring_cases
{
	my ($v, $acct) = @_;
	my $key = "acct:$acct";

	#---- the pool ----

	ok( RlockTest::wait_until(
			sub { $java->call('app', 'pool') eq "total=$n active=0 idle=$n" }, 10),
		"$v HikariCP opens $n connections");
	my $pids = $java->call('app', 'pids');
	my @pids = split /,/, $pids;
	is(scalar @pids, $n, "$v the pool has $n connections");
	my $backends = backends();
	is(join(',', map { (split /@/)[0] } split /,/, $backends), $pids,
		"$v PostgreSQL sees those backends");

	my $o = fan('try', 'up');
	is(pids_of($o), $pids,
		"$v a fan runs one transaction on each connection");
	is(summary($o), "true x$n", "$v rlock_try through JdbcTemplate, Redis up");

	#---- Redis stopped: every call fails with 58030, no connection lost ----

	my $hold = $java->send('app', 'fan', 'hold', 'held');
	ok(holding('held'), "$v $n transactions hold a lock each");
	$redis->stop;
	$java->call('ctl', 'go');
	$o = fan_result($hold);
	is(summary($o), "DataAccessResourceFailureException/58030 x$n",
		"$v Redis stopped: each commit holding a lock fails, translated by JdbcTransactionManager");
	is(pids_of($o), $pids, "$v on each connection");

	$o = fan('try', 'down');
	is(summary($o), "DataAccessResourceFailureException/58030 x$n",
		"$v rlock_try fails with DataAccessResourceFailureException (58030)");
	$o = fan('lock', 'down');
	is(summary($o), "DataAccessResourceFailureException/58030 x$n",
		"$v rlock_lock fails with DataAccessResourceFailureException (58030)");
	is(pids_of($o), $pids, "$v on the same connections");

	is($java->call('app', 'pids'), $pids, "$v the pool still has the same backends");
	is($java->call('app', 'pool'), "total=$n active=0 idle=$n",
		"$v HikariCP counts $n connections");
	is(backends(), $backends, "$v PostgreSQL sees the same backends, started when they were");

	#---- the example: an attempt while Redis is down, retried once it is back ----

	sql("INSERT INTO accounts VALUES ($acct, 100)");
	my $add = $java->send('app', 'add', $key, $acct, 10, 'pause');
	is($java->call('ctl', 'failed'), 'DataAccessResourceFailureException/58030',
		"$v example: the attempt made while Redis is down fails with 58030");
	$redis->restart;
	ok(RlockTest::wait_for_redis($node, 10), "$v Redis back, rlock connected");
	$java->call('ctl', 'go');
	my $r = $java->result($add, 30);
	is_deeply(fields($r->{value}),
		{ attempts => 2, failed => 'DataAccessResourceFailureException/58030', balance => 110 },
		"$v example: the second attempt commits");

	#---- service resumes on the same connections ----

	$o = fan('try', 'back');
	is(summary($o), "true x$n", "$v Redis back: rlock_try takes the locks");
	$o = fan('lock', 'back');
	is(summary($o), "locked x$n", "$v rlock_lock takes them");
	$hold = $java->send('app', 'fan', 'hold', 'again');
	ok(holding('again'), "$v $n transactions hold a lock each again");
	$java->call('ctl', 'go');
	$o = fan_result($hold);
	is(summary($o), "committed x$n", "$v their commits succeed");
	ok( RlockTest::wait_until(
			sub { $redis->cmd('EXISTS', map { "again-$_" } 0 .. $n - 1) == 0 }, 10),
		"$v and release the locks");
	is(pids_of($o), $pids, "$v on the same connections");
	is(backends(), $backends, "$v no connection was opened again");

	#---- the example: a lock lost before the commit ----

	# A row lock keeps the first attempt between its rlock_try and its
	# UPDATE; meanwhile its lock is deleted from Redis, so its commit is
	# refused with 40001.  The retry runs the transaction again.
	my $row = $node->background_psql('postgres');
	$row->query_safe('BEGIN');
	$row->query_safe("SELECT * FROM accounts WHERE id = $acct FOR UPDATE");
	$add = $java->send('app', 'add', $key, $acct, 10);
	ok( RlockTest::wait_until(
			sub {
				waiting_for_row() == 1
				  && sql("SELECT count(*) FROM rlock_locks WHERE key = '$key' AND state = 'held'") == 1;
			},
			20),
		"$v example: the first attempt holds the lock and waits for the row");
	is($redis->cmd('DEL', $key), 1, "$v its lock is deleted from Redis");
	$row->query_safe('COMMIT');
	$r = $java->result($add, 30);
	is_deeply(fields($r->{value}),
		{ attempts => 2, failed => 'CannotAcquireLockException/40001', balance => 120 },
		"$v example: the commit fails with CannotAcquireLockException (40001), the retry commits");
	is(sql("SELECT balance FROM accounts WHERE id = $acct"), 120,
		"$v the balance moved once");

	#---- the example: a busy lock ----

	$row->query_safe("SELECT rlock_session_lock('$key')");
	$add = $java->send('app', 'add', $key, $acct, 10, 'pause');
	is($java->call('ctl', 'failed'), 'CannotAcquireLockException/-',
		"$v example: a lock still busy after the wait fails the attempt");
	$row->query_safe("SELECT rlock_session_release('$key')");
	$java->call('ctl', 'go');
	$r = $java->result($add, 30);
	is_deeply(fields($r->{value}),
		{ attempts => 2, failed => 'CannotAcquireLockException/-', balance => 130 },
		"$v example: the next attempt takes the released lock");

	#---- the example: what a retry does not cure goes up at once ----

	$r = $java->result($java->send('app', 'add', 'k' x 600, $acct, 10), 30);
	is_deeply(fields($r->{value}),
		{ attempts => 1, failed => 'DataAccessResourceFailureException/54000',
		  error => 'DataAccessResourceFailureException/54000' },
		"$v example: a key too long (54000) is not retried");
	is(sql("SELECT balance FROM accounts WHERE id = $acct"), 130,
		"$v the balance moved once per call that succeeded");

	#---- binding the wait from Java ----

	$r = $java->result($java->send('app', 'bind', 'string', 'b'), 30);
	is($r->{error}, 'org.springframework.jdbc.BadSqlGrammarException',
		"$v a String wait: BadSqlGrammarException");
	like($r->{message}, qr/^42883 /, "$v SQLSTATE 42883: no rlock_try(varchar, varchar)");
	for my $how ('cast', 'pginterval')
	{
		is($java->call('app', 'bind', $how, 'b'), 'true', "$v $how: the lock is taken");
		$row->query_safe("SELECT rlock_session_lock('b')");
		$r = $java->result($java->send('app', 'bind', $how, 'b'), 30);
		is($r->{value}, 'false', "$v $how: a busy lock is not");
		my $waited = $r->{at} - $r->{start};
		cmp_ok($waited, '>=', 0.9, "$v $how: after the 1 s wait ($waited s)");
		cmp_ok($waited, '<', 2.5, "$v $how: and not 2.5 s");
		$row->query_safe("SELECT rlock_session_release('b')");
	}

	#---- a wait ended by lock_timeout or statement_timeout ----

	$row->query_safe(join(';',
		map { "SELECT rlock_session_lock('busy-$_')" } 0 .. $n - 1));
	$o = fan('locktimeout', 'busy');
	is(summary($o), "UncategorizedSQLException/55P03 x$n",
		"$v lock_timeout: UncategorizedSQLException (55P03)");
	$o = fan('statementtimeout', 'busy');
	is(summary($o), "QueryTimeoutException/57014 x$n",
		"$v statement_timeout: QueryTimeoutException (57014)");
	$row->query_safe('SELECT rlock_release_all()');

	#---- no connection evicted through it all ----

	is($java->call('app', 'pids'), $pids, "$v the pool has its first backends still");
	is(backends(), $backends, "$v and PostgreSQL sees no other");

	$row->quit;
}
