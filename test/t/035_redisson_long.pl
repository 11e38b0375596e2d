# rlock against the real Redisson over time and under load, for each
# Redisson version of RlockTest::Redisson at once:
#
# - both watchdogs: a Redisson holder is renewed by Redisson while a SQL
#   session waits past its 30 s lease, and a SQL holder by rlock's worker
#   while Redisson waits; each waiter gets the lock once the holder lets go;
# - 16 Redisson threads and 16 SQL sessions (pgbench) on one key, each
#   incrementing a counter row inside the lock: no two critical sections
#   overlap, and the count is exact.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run ();
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
my $node = RlockTest::node('main', $redis,
	conf => [ "listen_addresses = '127.0.0.1'", 'max_connections = 60' ]);
my @versions = @RlockTest::Redisson::VERSIONS;
my $jdbc = 'jdbc:postgresql://127.0.0.1:' . $node->port . '/postgres?user='
  . getpwuid($<);
my %java = map {
	$_ => RlockTest::Redisson->start($redis, version => $_, jdbc => $jdbc)
} @versions;

#---- both watchdogs, 35 s ----

my (%sql_waiter, %java_waiter, %sql_holder);
for my $v (@versions)
{
	my $java = $java{$v};
	$java->call('a.1', 'lock', "wd:java:$v");
	$sql_holder{$v} = $node->background_psql('postgres');
	$sql_holder{$v}->query_safe("BEGIN; SELECT rlock_try('wd:sql:$v')");
	$sql_waiter{$v} = $node->background_psql('postgres', on_error_stop => 0);
	RlockTest::send_query($sql_waiter{$v},
		"BEGIN; SELECT rlock_try('wd:java:$v', '60 s');");
	$java_waiter{$v} = $java->send('b.1', 'trylock', "wd:sql:$v", 60000);
}
my $t0 = time;
# both locks stay held past their 30 s leases, each renewed by its owner's
# watchdog, and neither waiter gets in
my $held = 1;
while (time - $t0 < 35)
{
	for my $v (@versions)
	{
		for my $key ("wd:java:$v", "wd:sql:$v")
		{
			$held = 0 unless $redis->cmd('EXISTS', $key);
		}
		$held = 0 if $java{$v}->ended($java_waiter{$v});
	}
	last unless $held;
	select(undef, undef, undef, 0.5);
}
ok($held, 'both locks held for 35 s, past the 30 s lease, both waiters waiting');
for my $v (@versions)
{
	cmp_ok($redis->cmd('PTTL', "wd:java:$v"), '>', 15000,
		"[$v] Redisson's watchdog renewed its lock");
	cmp_ok($redis->cmd('PTTL', "wd:sql:$v"), '>', 15000,
		"[$v] rlock's worker renewed its lock");
	$java{$v}->call('a.1', 'unlock', "wd:java:$v");
	my ($out, $err) = RlockTest::collect($sql_waiter{$v});
	like($out, qr/^t$/m, "[$v] the SQL waiter gets the lock from Redisson")
	  or diag($err);
	$sql_holder{$v}->query_safe('COMMIT');
	my $r = $java{$v}->result($java_waiter{$v}, 20);
	ok($r && $r->{value} eq 'true', "[$v] Redisson's waiter gets it from SQL");
	$sql_waiter{$v}->query_safe('COMMIT');
	$java{$v}->call('b.1', 'unlock', "wd:sql:$v");
	$sql_waiter{$v}->quit;
	$sql_holder{$v}->quit;
}

#---- 16 Redisson threads and 16 SQL sessions on one key ----

$node->safe_psql('postgres', q{
	CREATE TABLE counters (k text PRIMARY KEY, n bigint NOT NULL);
	CREATE TABLE spans (k text, s timestamptz, e timestamptz);
});
my $script = "$PostgreSQL::Test::Utils::tmp_check/stress.sql";
open(my $fh, '>', $script) or die $!;
print $fh <<'EOF';
BEGIN;
SELECT rlock_lock(':key');
SELECT n, extract(epoch FROM clock_timestamp()) AS s FROM counters WHERE k = ':key' \gset
UPDATE counters SET n = :n + 1 WHERE k = ':key';
INSERT INTO spans VALUES (':key', to_timestamp(:s), clock_timestamp());
COMMIT;
EOF
close($fh);

for my $v (@versions)
{
	my $key = "stress:$v";
	$node->safe_psql('postgres', "INSERT INTO counters VALUES ('$key', 0)");
	my $id = $java{$v}->send('s', 'stress', $key, 16, 25);
	my ($out, $err);
	my $bench = IPC::Run::run(
		[ 'pgbench', '-n', '-c', '16', '-j', '2', '-t', '25', '-D', "key=$key",
		  '-f', $script, '-h', $node->host, '-p', $node->port, 'postgres' ],
		'>', \$out, '2>', \$err);
	ok($bench, "[$v] 16 SQL sessions ran 25 transactions each") or diag($err);
	my $r = $java{$v}->result($id, 300);
	ok($r && $r->{ok}, "[$v] 16 Redisson threads ran 25 sections each")
	  or diag($r ? $r->{message} : 'no answer');
	is($node->safe_psql('postgres', "SELECT n FROM counters WHERE k = '$key'"),
		800, "[$v] the counter is exact: 800");
	is($node->safe_psql('postgres',
			"SELECT count(*) FROM spans WHERE k = '$key'"),
		800, "[$v] 800 critical sections recorded");
}
is(RlockTest::overlapping_spans($node), 0,
	'no two critical sections overlapped, Redisson and SQL alike');

$_->stop for values %java;
$node->stop;
$redis->stop;
done_testing();
