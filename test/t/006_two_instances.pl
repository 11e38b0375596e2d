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

my $redis = RlockTest::Redis->start;
my $na = RlockTest::node('a', $redis);
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
my $owner_a = $redis->cmd('HKEYS', 'two:k')->[0];
my $t0 = time;
$sa->query_safe('COMMIT');
like(scalar $sb->query("SELECT 'next'"), qr/^t\n/, "a's commit hands the lock to b");
my $elapsed = time - $t0;
cmp_ok($elapsed, '<', 5, "woken by a's unlock message ($elapsed s)");
my $owner_b = $redis->cmd('HKEYS', 'two:k')->[0];
isnt((split /:/, $owner_b)[0], (split /:/, $owner_a)[0],
	'each instance has its own owner uuid');
$sb->query_safe("SELECT rlock_session_release('two:k')");
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
