# 16 Redisson threads (the newest version of RlockTest::Redisson) and 16
# SQL sessions share one name as a read-write lock for 20 s: a writer
# adds 1 to a and then to b of one row, in two statements committed
# apart; a reader checks that a = b.  Java uses getReadWriteLock's two
# halves, SQL rlock_session_lock and rlock_session_lock_shared (two
# commits need a lock that outlives a transaction).
#
# - no reader ever saw a half-done write (a <> b);
# - no writer's section overlapped any other section, a reader's or a
#   writer's, of either side;
# - readers did share, SQL ones with Java ones;
# - the counts are exact: a = b = the writers' sections recorded.
use strict;
use warnings;

use IPC::Run ();
use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::Redis;
use RlockTest::Redisson;
use RlockTest::TLS;

plan skip_all => 'the Redisson cases run in the plain round'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('rwstress', $redis,
	conf => [ "listen_addresses = '127.0.0.1'", 'max_connections = 60',
			  'log_min_messages = warning', 'log_statement = none' ]);
my $version = $RlockTest::Redisson::VERSIONS[0];
my $key = 'rwstress';
my $seconds = 20;

$node->safe_psql('postgres', qq{
	CREATE TABLE rwdata (k text PRIMARY KEY, a bigint NOT NULL, b bigint NOT NULL);
	CREATE TABLE rwtorn (k text, a bigint, b bigint);
	CREATE TABLE rwspans (k text, who text, s timestamptz, e timestamptz, src text);
	INSERT INTO rwdata VALUES ('$key', 0, 0);
});
my $java = RlockTest::Redisson->start($redis, version => $version,
	jdbc => 'jdbc:postgresql://127.0.0.1:' . $node->port . '/postgres?user='
	  . getpwuid($<));

my $dir = PostgreSQL::Test::Utils::tempdir();
open(my $w, '>', "$dir/writer.sql") or die $!;
print $w <<'EOF';
SELECT rlock_session_lock(':key');
SELECT extract(epoch FROM clock_timestamp()) AS s \gset
UPDATE rwdata SET a = a + 1 WHERE k = ':key';
UPDATE rwdata SET b = b + 1 WHERE k = ':key';
INSERT INTO rwspans VALUES (':key', 'w', to_timestamp(:s), clock_timestamp(), 'sql');
SELECT rlock_session_release(':key');
EOF
close($w);
open(my $r, '>', "$dir/reader.sql") or die $!;
print $r <<'EOF';
SELECT rlock_session_lock_shared(':key');
SELECT extract(epoch FROM clock_timestamp()) AS s \gset
INSERT INTO rwtorn SELECT k, a, b FROM rwdata WHERE k = ':key' AND a <> b;
INSERT INTO rwspans VALUES (':key', 'r', to_timestamp(:s), clock_timestamp(), 'sql');
SELECT rlock_session_release_shared(':key');
EOF
close($r);

my $id = $java->send('s', 'rwstress', $key, 16, $seconds);
my ($out, $err);
my $bench = IPC::Run::run(
	[ 'pgbench', '-n', '-c', '16', '-j', '2', '-T', $seconds, '-D', "key=$key",
	  '-f', "$dir/writer.sql\@1", '-f', "$dir/reader.sql\@3",
	  '-h', $node->host, '-p', $node->port, 'postgres' ],
	'>', \$out, '2>', \$err);
ok($bench, '16 SQL sessions read and wrote') or diag($err);
my $res = $java->result($id, $seconds + 120);
ok($res && $res->{ok}, "16 Redisson $version threads read and wrote")
  or diag($res ? $res->{message} : 'no answer');
my ($jw, $jr) = split ' ', ($res->{value} // '0 0');

sub q1 { return $node->safe_psql('postgres', $_[0]) }

is(q1('SELECT count(*) FROM rwtorn'), 0, 'no reader saw a half-done write');
my $overlaps = q1(q{
	SELECT count(*) FROM (
		SELECT who, s, e,
			   max(e) OVER (ORDER BY s ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before,
			   lead(s) OVER (ORDER BY s) AS after
		FROM rwspans) x
	WHERE who = 'w' AND (s < before OR after < e)});
is($overlaps, 0, 'no writer overlapped any other section');
cmp_ok(q1(q{
	SELECT count(*) FROM (
		SELECT src, s, lag(e) OVER w AS pe, lag(src) OVER w AS ps
		FROM rwspans WHERE who = 'r' WINDOW w AS (ORDER BY s)) x
	WHERE s < pe AND src <> ps}), '>', 0, 'SQL and Java readers shared the lock');
my ($a, $b, $writes) = split /\|/, q1(
	"SELECT a, b, (SELECT count(*) FROM rwspans WHERE who = 'w') FROM rwdata WHERE k = '$key'");
is($a, $writes, "a counts every write ($writes)");
is($b, $writes, 'and so does b');
is(q1("SELECT count(*) FROM rwspans WHERE src = 'java'"), $jw + $jr,
	"every Java section recorded ($jw writes, $jr reads)");
cmp_ok(q1("SELECT count(*) FROM rwspans WHERE src = 'sql' AND who = 'w'"), '>', 0,
	'SQL wrote');
cmp_ok($jw, '>', 0, 'Java wrote');
diag(sprintf('%d s: %d writes and %d reads by SQL, %d writes and %d reads by Redisson %s',
		$seconds,
		q1("SELECT count(*) FROM rwspans WHERE src = 'sql' AND who = 'w'"),
		q1("SELECT count(*) FROM rwspans WHERE src = 'sql' AND who = 'r'"),
		$jw, $jr, $version));

$java->stop;
$node->stop;
$redis->stop;
done_testing();
