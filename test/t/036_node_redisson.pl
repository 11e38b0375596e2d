# rlock against node-redisson (npm), a second client that claims
# Redisson's lock layout, written independently of Redisson for Java:
# exclusion in both directions, and wake-up on unlock in both directions,
# with its latency.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;
use RlockTest::Redis;
use RlockTest::Redisson;
use RlockTest::TLS;

plan skip_all => 'the node-redisson cases run in the plain round'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('main', $redis);
my $js = RlockTest::Redisson->start_node($redis);
like($js->version, qr/^1\./, 'node-redisson ' . $js->version . ' runs');

sub sql { return $node->safe_psql('postgres', $_[0]) }

my $s = $node->background_psql('postgres', on_error_stop => 0);

#---- exclusion, both ways ----

$s->query_safe("BEGIN; SELECT rlock_try('n:x')");
is($js->call('a.1', 'trylock', 'n:x', 0), 'false',
	'a lock held by a transaction: tryLock fails');
is($js->call('a.1', 'islocked', 'n:x'), 'true', 'isLocked() says so');
$s->query_safe('COMMIT');
is($js->call('a.1', 'trylock', 'n:x', 0), 'true',
	'once committed, tryLock succeeds');
is($redis->holds('n:x')->{ $js->call('a.1', 'owner') }, 1,
	'with its owner field <client id>:<owner> in the hash');
is(sql("BEGIN; SELECT rlock_try('n:x'); COMMIT"), 'f',
	'a lock held by node-redisson: rlock_try fails');
is($js->call('a.2', 'trylock', 'n:x', 0), 'false',
	'another owner of the same client fails too');
$js->call('a.1', 'unlock', 'n:x');
is(sql("SELECT rlock_session_try('n:x'), rlock_session_release('n:x')"),
	't|t', 'unlock() frees it for SQL');

#---- wake-up on unlock, both ways ----

my (@to_js, @to_sql);
for my $i (1 .. 10)
{
	# a tryLock waiting on a transaction is woken by its commit
	$s->query_safe("BEGIN; SELECT rlock_try('n:w')");
	my $before = $redis->subscribers('n:w');
	my $id = $js->send('b.1', 'trylock', 'n:w', 20000);
	RlockTest::wait_until(sub { $redis->subscribers('n:w') > $before }, 10);
	# subscribed is not yet listening, in node-redisson
	RlockTest::wait_until(sub { $js->call('b.2', 'listeners', 'n:w') > 0 }, 10);
	my $t0 = time;
	$s->query_safe('COMMIT');
	my $r = $js->result($id, 25);
	ok($r && $r->{ok} && $r->{value} eq 'true',
		"wake-up $i: tryLock woken by the commit");
	push @to_js, ($r->{at} - $t0) * 1000 if $r;

	# an rlock_lock waiting on node-redisson is woken by unlock()
	RlockTest::send_query($s,
		"SET statement_timeout = '20s'; SELECT extract(epoch FROM clock_timestamp()) FROM (SELECT rlock_session_lock('n:w')) l;"
	);
	RlockTest::wait_until(
		sub {
			sql("SELECT count(*) FROM rlock_locks WHERE key = 'n:w' AND state = 'waiting'"
			) == 1;
		},
		10);
	$r = $js->result($js->send('b.1', 'unlock', 'n:w'), 10);
	my ($out, $err) = RlockTest::collect($s);
	like($out, qr/^\d+\.\d+$/m, "wake-up $i: rlock_lock woken by unlock()")
	  or diag($err);
	push @to_sql, ($1 - $r->{start}) * 1000 if $out =~ /^(\d+\.\d+)$/m;
	$s->query_safe("RESET statement_timeout; SELECT rlock_session_release('n:w')");
}
@to_js = sort { $a <=> $b } @to_js;
@to_sql = sort { $a <=> $b } @to_sql;
diag(sprintf(
		'node-redisson wake-up, ms: SQL commit to node p50 %.1f p99 %.1f; node unlock to SQL p50 %.1f p99 %.1f',
		$to_js[ int(0.5 * $#to_js + 0.5) ], $to_js[-1],
		$to_sql[ int(0.5 * $#to_sql + 0.5) ], $to_sql[-1]));

#---- a name with "{" after its start: node-redisson's channel differs ----

$s->query_safe("BEGIN; SELECT rlock_try('n{x}y')");
my $waiter = $js->send('d.1', 'trylock', 'n{x}y', 3000);
ok( RlockTest::wait_until(
		sub {
			$redis->cmd('PUBSUB', 'NUMSUB', 'redisson_lock__channel:{n{x}y}')->[1] == 1;
		},
		10),
	'node-redisson waits on redisson_lock__channel:{n{x}y}');
is($redis->subscribers('n{x}y'), 0,
	'not on redisson_lock__channel:n{x}y, where rlock and Redisson publish');
$s->query_safe('COMMIT');
$js->result($waiter, 10);

#---- forceUnlock() ends a transaction's lock ----

$s->query_safe('\\set VERBOSITY verbose');
$s->query_safe("BEGIN; SELECT rlock_try('n:f')");
is($js->call('c.1', 'forceunlock', 'n:f'), 'true',
	"forceUnlock() removes a transaction's lock");
$s->query('COMMIT');
like($s->{stderr}, qr/ERROR:  40001: lock "n:f" was lost before the transaction committed/,
	'and the commit fails with 40001');
$s->{stderr} = '';

$s->quit;
$js->stop;
$node->stop;
$redis->stop;
done_testing();
