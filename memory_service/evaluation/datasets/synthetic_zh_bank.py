"""The word banks of the Chinese and mixed-language benchmark: people, slots (one concept
each, said in Chinese and in English, with several fact shapes and several ways to ask),
filler memories and off-topic questions. Data only; ``synthetic_zh`` draws from it.

Questions paraphrase on purpose: a fact says 老师 where the question asks 职业, 跑步 where it
asks 运动, 女儿 where it asks 孩子, so the same words rarely carry a question to its fact.
The order of every tuple is part of the seed's contract: reordering changes the dataset.
"""

from __future__ import annotations

from dataclasses import dataclass

# (Chinese name, gender): the romanised name (Wang Xiaoming) is made from it with pypinyin.
PEOPLE: tuple[tuple[str, str], ...] = (
    ("王小明", "m"), ("李静", "f"), ("张伟", "m"), ("陈晓燕", "f"), ("杨帆", "m"),
    ("赵丽娟", "f"), ("黄志强", "m"), ("周婷", "f"), ("吴浩", "m"), ("徐佳怡", "f"),
    ("孙建国", "m"), ("马玲", "f"), ("朱鹏", "m"), ("胡雪", "f"), ("郭子豪", "m"),
    ("林雨桐", "f"), ("何军", "m"), ("高梦琪", "f"),
)  # fmt: skip
# The people a user's memory also mentions (a colleague, a friend): near misses.
OTHERS: tuple[str, ...] = ("李强", "赵敏", "周杰", "孙丽", "钱文", "蒋红", "冯磊", "韩梅")
RELATIONS_ZH: tuple[str, ...] = ("同事", "朋友", "邻居", "表哥", "大学同学")
RELATIONS_EN: tuple[str, ...] = ("colleague", "friend", "neighbour", "cousin", "old classmate")
PRONOUN = {
    "zh": {"m": "他", "f": "她"},
    "en": {"m": "he", "f": "she"},
    "en_pos": {"m": "his", "f": "her"},
}


@dataclass(frozen=True, slots=True)
class Concept:
    """One thing a user can have a fact about, in both languages.

    ``values``: pairs of (Chinese fields, English fields) filling the templates' ``{a}``,
    ``{b}``... Fact templates name the user ``{n}``; English question templates use ``{n}``
    (subject) and ``{ns}`` (possessive), so a question can say "he"/"his" instead of the name.
    """

    name: str
    kind: str
    values: tuple[tuple[dict[str, str], dict[str, str]], ...]
    fact_zh: tuple[str, ...]
    fact_en: tuple[str, ...]
    ask_zh: tuple[str, ...]
    ask_en: tuple[str, ...]


def _p(zh: dict[str, str], en: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    return zh, en


CONCEPTS: tuple[Concept, ...] = (
    Concept(
        "job",
        "fact",
        (
            _p(
                {"a": "中学数学老师", "b": "一所中学"},
                {"a": "a maths teacher", "b": "a secondary school"},
            ),
            _p(
                {"a": "儿科医生", "b": "市儿童医院"},
                {"a": "a paediatrician", "b": "the city children's hospital"},
            ),
            _p(
                {"a": "软件工程师", "b": "一家互联网公司"},
                {"a": "a software engineer", "b": "an internet company"},
            ),
            _p({"a": "会计", "b": "一家物流公司"}, {"a": "an accountant", "b": "a logistics firm"}),
            _p({"a": "律师", "b": "一家律师事务所"}, {"a": "a lawyer", "b": "a law firm"}),
            _p({"a": "护士", "b": "人民医院"}, {"a": "a nurse", "b": "the People's Hospital"}),
            _p({"a": "厨师", "b": "一家川菜馆"}, {"a": "a chef", "b": "a Sichuan restaurant"}),
            _p(
                {"a": "建筑设计师", "b": "一家设计院"},
                {"a": "an architect", "b": "a design institute"},
            ),
        ),
        ("{n}是一名{a}，在{b}上班。", "{n}在{b}当{a}。", "{n}目前的身份是{b}的{a}。"),
        ("{n} works as {a} at {b}.", "{n} is {a} employed by {b}.", "{n} has a job as {a} at {b}."),
        (
            "{n}是做什么工作的？",
            "{n}的职业是什么？",
            "{n}靠什么谋生？",
            "{n}在哪个单位上班？",
            "{n}是干哪一行的？",
        ),
        (
            "What does {n} do for a living?",
            "What is {ns} job?",
            "What's {ns} profession?",
            "Where does {n} work?",
            "Which line of work is {n} in?",
        ),
    ),
    Concept(
        "city",
        "fact",
        (
            _p({"a": "北京"}, {"a": "Beijing"}),
            _p({"a": "上海"}, {"a": "Shanghai"}),
            _p({"a": "深圳"}, {"a": "Shenzhen"}),
            _p({"a": "成都"}, {"a": "Chengdu"}),
            _p({"a": "杭州"}, {"a": "Hangzhou"}),
            _p({"a": "武汉"}, {"a": "Wuhan"}),
            _p({"a": "南京"}, {"a": "Nanjing"}),
            _p({"a": "广州"}, {"a": "Guangzhou"}),
        ),
        ("{n}住在{a}。", "{n}现在定居在{a}。", "{n}一家目前在{a}生活。"),
        ("{n} lives in {a}.", "{n}'s home is in {a} these days.", "{n} is settled in {a} now."),
        ("{n}住在哪里？", "{n}家在哪个城市？", "{n}现在生活在什么地方？", "{n}目前定居在哪儿？"),
        (
            "Where does {n} live?",
            "Which city is {n} based in?",
            "Where is {ns} home now?",
            "What town does {n} live in?",
        ),
    ),
    Concept(
        "hometown",
        "fact",
        (
            _p({"a": "哈尔滨"}, {"a": "Harbin"}),
            _p({"a": "重庆"}, {"a": "Chongqing"}),
            _p({"a": "长沙"}, {"a": "Changsha"}),
            _p({"a": "青岛"}, {"a": "Qingdao"}),
            _p({"a": "昆明"}, {"a": "Kunming"}),
            _p({"a": "厦门"}, {"a": "Xiamen"}),
            _p({"a": "西安"}, {"a": "Xi'an"}),
        ),
        ("{n}的老家在{a}。", "{n}出生在{a}，在那里长大。", "{n}是土生土长的{a}人。"),
        ("{n} grew up in {a}.", "{n} was born in {a}.", "{n}'s hometown is {a}."),
        ("{n}是哪里人？", "{n}的家乡在哪儿？", "{n}小时候在哪里长大？", "{n}的籍贯是哪里？"),
        (
            "Where is {n} from?",
            "What is {ns} hometown?",
            "Where did {n} grow up?",
            "Where was {n} born?",
        ),
    ),
    Concept(
        "child",
        "fact",
        (
            _p(
                {"a": "女儿", "b": "八", "c": "小学二年级"},
                {"a": "daughter", "b": "eight", "c": "second grade of primary school"},
            ),
            _p(
                {"a": "儿子", "b": "十二", "c": "初中一年级"},
                {"a": "son", "b": "twelve", "c": "the first year of middle school"},
            ),
            _p(
                {"a": "女儿", "b": "五", "c": "幼儿园大班"},
                {"a": "daughter", "b": "five", "c": "kindergarten"},
            ),
            _p(
                {"a": "儿子", "b": "十六", "c": "高中"},
                {"a": "son", "b": "sixteen", "c": "high school"},
            ),
            _p(
                {"a": "双胞胎女儿", "b": "十", "c": "小学四年级"},
                {"a": "twin daughters", "b": "ten", "c": "fourth grade"},
            ),
        ),
        ("{n}有一个{a}，今年{b}岁，在读{c}。", "{n}的{a}{b}岁了，正在上{c}。"),
        ("{n} has a {a} aged {b} who is in {c}.", "{n}'s {a}, {b} years old, attends {c}."),
        (
            "{n}有孩子吗？",
            "{n}的孩子在哪里上学？",
            "{n}家小孩多大了？",
            "{n}的子女在读几年级？",
            "{n}家娃上学了没有？",
        ),
        (
            "Does {n} have kids?",
            "How old is {ns} child?",
            "Which school year is {ns} kid in?",
            "Tell me about {ns} children.",
        ),
    ),
    Concept(
        "spouse",
        "fact",
        (
            _p({"a": "刘芳", "b": "十"}, {"a": "Liu Fang", "b": "ten"}),
            _p({"a": "陈刚", "b": "五"}, {"a": "Chen Gang", "b": "five"}),
            _p({"a": "宋佳", "b": "三"}, {"a": "Song Jia", "b": "three"}),
            _p({"a": "唐亮", "b": "十五"}, {"a": "Tang Liang", "b": "fifteen"}),
        ),
        ("{n}和{a}结婚已经{b}年了。", "{n}的爱人叫{a}，两人结婚{b}年。"),
        (
            "{n} has been married to {a} for {b} years.",
            "{n}'s spouse is {a}; they wed {b} years ago.",
        ),
        ("{n}的另一半叫什么名字？", "{n}结婚了吗？", "{n}的伴侣是谁？", "{n}和谁成了家？"),
        (
            "Who is {n} married to?",
            "What's the name of {ns} partner?",
            "Is {n} married?",
            "Who is {ns} husband or wife?",
        ),
    ),
    Concept(
        "food",
        "preference",
        (
            _p({"a": "火锅"}, {"a": "hotpot"}),
            _p({"a": "饺子"}, {"a": "dumplings"}),
            _p({"a": "北京烤鸭"}, {"a": "Peking duck"}),
            _p({"a": "寿司"}, {"a": "sushi"}),
            _p({"a": "小笼包"}, {"a": "soup dumplings"}),
            _p({"a": "意大利面"}, {"a": "pasta"}),
            _p({"a": "红烧肉"}, {"a": "braised pork belly"}),
        ),
        ("{n}最爱吃{a}。", "{n}特别喜欢{a}，每周都要吃一次。", "说到吃的，{n}的心头好是{a}。"),
        (
            "{n}'s favourite food is {a}.",
            "{n} loves {a} and has it every week.",
            "{n} could eat {a} every day.",
        ),
        ("{n}喜欢吃什么？", "{n}最爱的菜是哪道？", "请{n}吃饭点什么好？", "{n}的口味偏好是什么？"),
        (
            "What food does {n} like?",
            "What is {ns} favourite dish?",
            "What should I order if I take {n} out to eat?",
            "Which meal makes {n} happiest?",
        ),
    ),
    Concept(
        "diet",
        "preference",
        (
            _p({"a": "是素食者，不吃任何肉类"}, {"a": "is a vegetarian and eats no meat"}),
            _p({"a": "一点辣都不能吃"}, {"a": "cannot handle any spicy food"}),
            _p({"a": "特别讨厌香菜"}, {"a": "really hates coriander"}),
            _p({"a": "不喝酒，滴酒不沾"}, {"a": "never drinks alcohol"}),
        ),
        ("{n}{a}。", "大家都知道{n}{a}。"),
        ("{n} {a}.", "Everyone knows that {n} {a}."),
        (
            "{n}有什么忌口？",
            "给{n}做饭要注意什么？",
            "{n}有什么不吃的东西吗？",
            "和{n}聚餐有什么讲究？",
        ),
        (
            "Is there anything {n} won't eat?",
            "Does {n} have dietary restrictions?",
            "What should I avoid when cooking for {n}?",
            "Anything to keep in mind when inviting {n} to dinner?",
        ),
    ),
    Concept(
        "health",
        "fact",
        (
            _p({"a": "对花生过敏"}, {"a": "is allergic to peanuts"}),
            _p({"a": "对青霉素过敏"}, {"a": "is allergic to penicillin"}),
            _p(
                {"a": "有高血压，每天吃降压药"},
                {"a": "has high blood pressure and takes pills for it daily"},
            ),
            _p({"a": "患有哮喘，随身带着喷雾"}, {"a": "has asthma and always carries an inhaler"}),
            _p(
                {"a": "有二型糖尿病，需要控制血糖"},
                {"a": "has type 2 diabetes and watches blood sugar"},
            ),
        ),
        ("{n}{a}。", "医生说{n}{a}。"),
        ("{n} {a}.", "The doctor says {n} {a}."),
        (
            "{n}有什么健康问题？",
            "{n}身体有什么毛病吗？",
            "{n}需要注意哪些健康状况？",
            "{n}有没有什么病史？",
        ),
        (
            "Does {n} have any health issues?",
            "What medical conditions does {n} have?",
            "Is {n} healthy?",
            "Anything about {ns} health I should know?",
        ),
    ),
    Concept(
        "exercise",
        "event",
        (
            _p({"a": "跑步五公里"}, {"a": "runs five kilometres"}),
            _p({"a": "去游泳馆游泳"}, {"a": "goes swimming at the pool"}),
            _p({"a": "练一个小时瑜伽"}, {"a": "does an hour of yoga"}),
            _p({"a": "去健身房撸铁"}, {"a": "lifts weights at the gym"}),
            _p({"a": "骑自行车上班"}, {"a": "cycles to work"}),
            _p({"a": "打羽毛球"}, {"a": "plays badminton"}),
        ),
        ("{n}每天早上{a}。", "{n}坚持每周三次{a}。"),
        ("Every morning {n} {a}.", "{n} {a} three times a week."),
        ("{n}平时做什么运动？", "{n}怎么锻炼身体？", "{n}有健身的习惯吗？", "{n}怎么保持身材？"),
        (
            "What sport does {n} do?",
            "How does {n} stay fit?",
            "Does {n} exercise?",
            "What's {ns} workout routine?",
        ),
    ),
    Concept(
        "hobby",
        "preference",
        (
            _p({"a": "弹钢琴"}, {"a": "playing the piano"}),
            _p({"a": "练书法"}, {"a": "Chinese calligraphy"}),
            _p({"a": "摄影"}, {"a": "photography"}),
            _p({"a": "下围棋"}, {"a": "playing Go"}),
            _p({"a": "钓鱼"}, {"a": "fishing"}),
            _p({"a": "画油画"}, {"a": "oil painting"}),
        ),
        ("{n}的爱好是{a}。", "{n}业余时间喜欢{a}。", "{n}一有空就去{a}。"),
        (
            "{n}'s hobby is {a}.",
            "In spare time {n} enjoys {a}.",
            "{n} spends free evenings on {a}.",
        ),
        (
            "{n}有什么兴趣爱好？",
            "{n}空闲时间喜欢干什么？",
            "{n}周末一般怎么消遣？",
            "{n}下班后喜欢做点什么？",
        ),
        (
            "What are {ns} hobbies?",
            "What does {n} do in free time?",
            "How does {n} unwind?",
            "What is {n} passionate about outside work?",
        ),
    ),
    Concept(
        "pet",
        "fact",
        (
            _p({"a": "一只叫豆豆的柯基犬"}, {"a": "a corgi called Doudou"}),
            _p({"a": "一只橘猫，名叫咪咪"}, {"a": "a ginger cat named Mimi"}),
            _p({"a": "一只会说话的鹦鹉"}, {"a": "a talking parrot"}),
            _p({"a": "两只小乌龟"}, {"a": "two small turtles"}),
            _p({"a": "一只白色的兔子"}, {"a": "a white rabbit"}),
        ),
        ("{n}养了{a}。", "{n}家里有{a}。"),
        ("{n} has {a}.", "{n} keeps {a} at home."),
        ("{n}养宠物吗？", "{n}家里有什么小动物？", "{n}养了什么动物？"),
        ("Does {n} have any pets?", "What animal does {n} keep?", "Is there a pet in {ns} home?"),
    ),
    Concept(
        "car",
        "fact",
        (
            _p({"a": "一辆白色的特斯拉"}, {"a": "a white Tesla"}),
            _p({"a": "一辆比亚迪电动车"}, {"a": "a BYD electric car"}),
            _p({"a": "一辆丰田凯美瑞"}, {"a": "a Toyota Camry"}),
            _p({"a": "一辆红色的大众高尔夫"}, {"a": "a red Volkswagen Golf"}),
            _p({"a": "一辆黑色的宝马"}, {"a": "a black BMW"}),
        ),
        ("{n}开{a}。", "{n}的车是{a}。", "{n}每天开着{a}上下班。"),
        ("{n} drives {a}.", "{n}'s car is {a}.", "{n} commutes in {a}."),
        ("{n}开什么车？", "{n}的座驾是什么？", "{n}的车是什么牌子的？"),
        (
            "What car does {n} drive?",
            "What kind of vehicle does {n} own?",
            "Which brand is {ns} car?",
        ),
    ),
    Concept(
        "fear",
        "fact",
        (
            _p({"a": "害怕坐飞机"}, {"a": "is afraid of flying"}),
            _p({"a": "特别怕蛇"}, {"a": "is terrified of snakes"}),
            _p({"a": "有恐高症"}, {"a": "is scared of heights"}),
            _p({"a": "很怕看牙医"}, {"a": "dreads going to the dentist"}),
        ),
        ("{n}{a}。", "{n}从小就{a}。"),
        ("{n} {a}.", "Since childhood {n} {a}."),
        ("{n}怕什么？", "有什么东西让{n}紧张害怕？", "{n}有什么恐惧症吗？"),
        ("What is {n} afraid of?", "What scares {n}?", "Does {n} have any phobias?"),
    ),
    Concept(
        "language",
        "event",
        (
            _p({"a": "日语"}, {"a": "Japanese"}),
            _p({"a": "西班牙语"}, {"a": "Spanish"}),
            _p({"a": "法语"}, {"a": "French"}),
            _p({"a": "德语"}, {"a": "German"}),
        ),
        ("{n}最近在学{a}。", "{n}报了一个{a}培训班，每周上两次课。"),
        ("{n} has been learning {a} lately.", "{n} takes {a} lessons twice a week."),
        ("{n}在学什么外语？", "{n}最近在进修什么？", "{n}打算掌握哪门语言？"),
        (
            "Which language is {n} studying?",
            "Is {n} learning anything new?",
            "What foreign language lessons does {n} take?",
        ),
    ),
    Concept(
        "travel",
        "event",
        (
            _p({"a": "日本"}, {"a": "Japan"}),
            _p({"a": "冰岛"}, {"a": "Iceland"}),
            _p({"a": "云南"}, {"a": "Yunnan"}),
            _p({"a": "新西兰"}, {"a": "New Zealand"}),
            _p({"a": "泰国"}, {"a": "Thailand"}),
        ),
        ("{n}计划明年春天去{a}旅行。", "{n}正在筹备去{a}的旅游。"),
        ("{n} plans a trip to {a} next spring.", "{n} is saving up for a holiday in {a}."),
        ("{n}打算去哪里旅游？", "{n}下次度假去哪儿？", "{n}有什么出行计划？"),
        (
            "Where is {n} going on holiday?",
            "What trip is {n} planning?",
            "Which country does {n} want to visit next?",
        ),
    ),
    Concept(
        "drink",
        "preference",
        (
            _p({"a": "每天要喝两杯黑咖啡"}, {"a": "drinks two cups of black coffee a day"}),
            _p({"a": "只喝绿茶，尤其是龙井"}, {"a": "only drinks green tea, Longjing above all"}),
            _p({"a": "每天早上喝一杯豆浆"}, {"a": "has a glass of soy milk every morning"}),
        ),
        ("{n}{a}。", "{n}的习惯是{a}。"),
        ("{n} {a}.", "It is {ns} habit: {n} {a}."),
        ("{n}喜欢喝什么？", "{n}平时喝茶还是喝咖啡？", "给{n}准备什么饮料好？"),
        (
            "What does {n} like to drink?",
            "Is {n} a tea or coffee person?",
            "What beverage should I offer {n}?",
        ),
    ),
    Concept(
        "birthday",
        "fact",
        (
            _p({"a": "3月12日"}, {"a": "March 12"}),
            _p({"a": "7月8日"}, {"a": "July 8"}),
            _p({"a": "10月25日"}, {"a": "October 25"}),
            _p({"a": "12月3日"}, {"a": "December 3"}),
        ),
        ("{n}的生日是{a}。", "{n}每年{a}过生日。"),
        ("{n}'s birthday is on {a}.", "{n} was born on {a}."),
        ("{n}哪天过生日？", "{n}的生日是几月几号？", "{n}的生辰是哪天？"),
        ("When is {ns} birthday?", "On what date does {n} celebrate turning a year older?"),
    ),
)

# Memories about the user that answer none of the questions (fillers), in both languages.
FILLERS_ZH: tuple[str, ...] = (
    "{n}上周六去超市买了一箱牛奶。",
    "{n}的手机屏幕上个月摔碎了。",
    "{n}昨天晚上看了一部科幻电影。",
    "{n}把家里的客厅重新刷成了浅灰色。",
    "{n}上个月换了一个新的笔记本电脑。",
    "{n}在网上订了一套新的窗帘。",
    "{n}周三去银行办了一张信用卡。",
    "{n}今年春节回了一趟老家过年。",
    "{n}最近在追一部古装电视剧。",
    "{n}的阳台上种了几盆多肉植物。",
    "{n}上周参加了一个朋友的婚礼。",
    "{n}把旧衣服捐给了社区。",
)
FILLERS_EN: tuple[str, ...] = (
    "{n} renewed a passport in March.",
    "{n} went to a jazz concert last Friday.",
    "{n} bought a new umbrella after losing the old one.",
    "{n} repainted the bathroom door blue.",
    "{n} ordered a standing desk online.",
    "{n} fixed a leaking kitchen tap over the weekend.",
    "{n} signed up for a newsletter about gardening.",
    "{n} lent a ladder to the people next door.",
    "{n} watched a documentary about volcanoes on Sunday.",
    "{n} replaced the batteries in the smoke alarm.",
    "{n} switched to a new mobile phone plan.",
    "{n} visited a museum of modern art last month.",
)

# Questions about nothing any user's memory holds: the false-injection probes per language.
OFFTOPIC_ZH: tuple[str, ...] = (
    "今天天气怎么样？",
    "股票市场明天会涨吗？",
    "秘鲁的首都是哪里？",
    "怎么用Python读取一个CSV文件？",
    "一光年有多少公里？",
    "帮我把这句话翻译成英文：会议推迟到下周。",
    "世界上最高的山峰是哪座？",
    "二次方程的求根公式是什么？",
    "明天北京会下雨吗？",
    "比特币现在多少钱一个？",
    "谁写了《红楼梦》？",
    "如何给路由器重新设置密码？",
    "太阳系有几颗行星？",
    "帮我写一封请假邮件。",
    "黄金价格最近为什么上涨？",
    "光合作用的原理是什么？",
    "下一届奥运会在哪个城市举办？",
    "怎么在Excel里做数据透视表？",
    "地球到月球有多远？",
    "推荐几本关于经济学的入门书。",
    "这个周末有台风吗？",
    "什么是区块链技术？",
    "人民币兑美元的汇率是多少？",
    "给我讲一个关于宇宙的冷知识。",
)
OFFTOPIC_EN: tuple[str, ...] = (
    "What is the capital of Peru?",
    "What's the weather like today?",
    "Will the stock market go up tomorrow?",
    "How do I read a CSV file in Python?",
    "How many kilometres are in a light year?",
    "Translate 'the meeting is moved to next week' into French.",
    "What is the tallest mountain in the world?",
    "What is the quadratic formula?",
    "Is it going to rain in London tomorrow?",
    "How much is one bitcoin worth right now?",
    "Who wrote Pride and Prejudice?",
    "How do I reset my router password?",
    "How many planets are in the solar system?",
    "Draft an email asking my manager for a day off.",
    "Why has the price of gold gone up recently?",
    "Explain how photosynthesis works.",
    "Which city hosts the next Olympic Games?",
    "How do I make a pivot table in Excel?",
    "How far is the Moon from the Earth?",
    "Recommend some introductory books on economics.",
    "Is a typhoon expected this weekend?",
    "What is blockchain technology?",
    "What is the euro to dollar exchange rate?",
    "Tell me a fun fact about the universe.",
)
