# Two PostgreSQL instances sharing one Redis: they exclude each other,
# wake each other, and under concurrent load never hold the lock at the
# same time.

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;
use RlockTest::TLS;

plan skip_all => 'two instances sharing locks do not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $na = RlockTest::node('a', $redis, conf => ["rlock.instance_name = 'db-a'"]);
# (the test framework sets cluster_name to the node's name, "b")
my $nb = RlockTest::node('b', $redis);

my $sa = $na->background_psql('postgres');
$sa->query_safe('BEGIN');
is($sa->query_safe("SELECT rlock_try('two:k')"), 't', 'instance a takes two:k');
is($nb->safe_psql('postgres', "SELECT rlock_try('two:k')"),
	'f', 'instance b cannot');

my $sb = $nb->background_psql('postgres');
$sb->query_until(qr/waiting/,
	"\\echo waiting\nSELECT rlock_session_try('two:k', '30 s');\n");
ok(RlockTest::wait_for_subscribers($redis, 'two:k', 1), 'b waits, subscribed');
my $owner_a = $redis->owners('two:k')->[0];
my $t0 = time;
$sa->query_safe('COMMIT');
like(scalar $sb->query("SELECT 'next'"), qr/^t\n/, "a's commit hands the lock to b");
my $elapsed = time - $t0;
cmp_ok($elapsed, '<', 5, "woken by a's unlock message ($elapsed s)");
my $owner_b = $redis->owners('two:k')->[0];
isnt((split /:/, $owner_b)[0], (split /:/, $owner_a)[0],
	'each instance has its own owner uuid');

# who holds it, asked from either instance: b's session, by name and pid
my $sb_pid = $sb->query_safe('SELECT pg_backend_pid()');
my $holder_sql = "SELECT owner, count, holder, instance, pid, lease > '0'::interval, owners"
  . " FROM rlock_holder('two:k')";
# (a new session is announced within a second)
ok( RlockTest::wait_until(
		sub {
			$na->safe_psql('postgres', $holder_sql) eq "$owner_b|1|rlock|b|$sb_pid|t|1";
		}),
	"instance a sees b's session holding it: instance b (cluster_name), b's pid")
  or diag($na->safe_psql('postgres', $holder_sql));
is($nb->safe_psql('postgres', $holder_sql),
	"$owner_b|1|rlock|b|$sb_pid|t|1", 'b sees its own session the same way');
$sb->query_safe("SELECT rlock_session_release('two:k')");
is($na->safe_psql('postgres', "SELECT count(*) FROM rlock_holder('two:k') WHERE owner IS NULL"),
	'1', 'a free lock: a row of NULLs');
# a's name is rlock.instance_name; a Redisson client is shown as such
$sa->query_safe("SELECT rlock_session_try('two:a')");
my $sa_pid = $sa->query_safe('SELECT pg_backend_pid()');
ok( RlockTest::wait_until(
		sub {
			$nb->safe_psql('postgres',
				"SELECT instance || ' ' || pid FROM rlock_holder('two:a')") eq "db-a $sa_pid";
		}),
	"b names a's holder: db-a (rlock.instance_name) and its pid");
$sa->query_safe("SELECT rlock_session_release('two:a')");
$redis->cmd('HSET', 'two:j', 'dead0000-1111-4222-8333-444455556666:42', 3);
is($na->safe_psql('postgres',
		"SELECT owner, count, holder, instance IS NULL, pid IS NULL, lease IS NULL FROM rlock_holder('two:j')"),
	'dead0000-1111-4222-8333-444455556666:42|3|redisson|t|t|t',
	'a Redisson client (no registry entry, no lease): holder redisson');
# what another client put there cannot break the function: bytes that are
# no UTF-8, control characters, a registry that is not a hash
my $bad_uuid = 'bad00000-1111-4222-8333-444455556666';
$redis->cmd('HSET', 'two:bad', "$bad_uuid:7", 5);
$redis->cmd('HSET', "rlock_instance:{$bad_uuid}", 'name', "ev\xffil\nname", '7', 'pid');
is($na->safe_psql('postgres',
		"SELECT count, holder, instance, pid IS NULL FROM rlock_holder('two:bad')"),
	'5|rlock|ev\u00FFil?name|t',
	'hostile values come out escaped or NULL');
$redis->cmd('DEL', "rlock_instance:{$bad_uuid}");
$redis->cmd('SET', "rlock_instance:{$bad_uuid}", 'not a hash');
is($na->safe_psql('postgres', "SELECT holder FROM rlock_holder('two:bad')"),
	'redisson', 'a registry of the wrong type reads as none');
$redis->cmd('DEL', 'two:bad', 'two:j', "rlock_instance:{$bad_uuid}");
# the registry entries expire with their instance
ok($redis->cmd('PTTL', 'rlock_instance:{' . (split /:/, $owner_b)[0] . '}') > 0,
	"b's registry entry has a lifetime");
$sa->quit;
$sb->quit;

# concurrent load from both instances on one key: no two holders overlap
for my $node ($na, $nb)
{
	$node->safe_psql('postgres', q{
		CREATE TABLE spans (node text, s timestamptz, e timestamptz);
		CREATE FUNCTION critical(node text) RETURNS void
		LANGUAGE plpgsql AS $$
		DECLARE
			t0 timestamptz := clock_timestamp();
		BEGIN
			PERFORM pg_sleep(0.001);
			INSERT INTO spans VALUES (node, t0, clock_timestamp());
		END $$;
	});
}
my $dir = PostgreSQL::Test::Utils::tempdir;
my @runs;
for my $node ($na, $nb)
{
	my $script = "$dir/" . $node->name . '.sql';
	open(my $fh, '>', $script) or die $!;
	print $fh "BEGIN;\nSELECT rlock_lock('two:counter');\nSELECT critical('"
	  . $node->name . "');\nCOMMIT;\n";
	close $fh;
	push @runs,
	  IPC::Run::start(
		[
			'pgbench', '-n', '-c', '4', '-j', '2', '-t', '25', '-f', $script,
			'-h', $node->host, '-p', $node->port, 'postgres'
		],
		'>', "$dir/" . $node->name . '.out',
		'2>&1');
}
my $ok = 1;
$ok &&= $_->finish for @runs;
ok($ok, 'pgbench ran on both instances');

my @spans;
for my $node ($na, $nb)
{
	push @spans, map { [ split /\|/ ] } split /\n/,
	  $node->safe_psql('postgres',
		"SELECT node, extract(epoch FROM s), extract(epoch FROM e) FROM spans");
}
is(scalar(@spans), 200, '200 critical sections ran');
@spans = sort { $a->[1] <=> $b->[1] } @spans;
my $overlaps = 0;
for my $i (1 .. $#spans)
{
	$overlaps++ if $spans[$i][1] < $spans[ $i - 1 ][2];
}
is($overlaps, 0, 'no two critical sections overlapped');
my %per_node;
$per_node{ $_->[0] }++ for @spans;
is_deeply(\%per_node, { a => 100, b => 100 }, 'both instances took turns');
is($redis->cmd('EXISTS', 'two:counter'), 0, 'and the lock is free at the end');

done_testing();
